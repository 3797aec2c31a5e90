"""The projects' repositories, shared by checkout (which writes them) and build (which reads
them): git (:mod:`.git`), the manifest of pinned commits (:mod:`.manifest`), torch's Triton pin
(:mod:`.tritonpin`) and the shapes of origins and refs that may reach git (:mod:`.cmdargs`)."""
