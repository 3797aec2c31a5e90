"""A torchaudio-shaped fixture: a host-only extension built against the installed torch fixture."""
