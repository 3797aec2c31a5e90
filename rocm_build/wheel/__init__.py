"""Wheels as files: the checked streaming reader (:mod:`.wheelread`), the streaming writer and
the one RECORD writer (:mod:`.wheelfile`), METADATA and WHEEL read and edited (:mod:`.wheelmeta`),
deflate in joinable pieces (:mod:`.rawdeflate`), its cache (:mod:`.deflatecache`) and the one
value a writer deflates by (:mod:`.deflate`: deflater, level, cache), the one
safe pass over a wheel's members (:mod:`.analyze`) and what a torch wheel says it was built
with (:mod:`.torchinfo`)."""
