"""Wheels as files: the checked streaming reader (:mod:`.wheelread`), the streaming writer and
the one RECORD writer (:mod:`.wheelfile`), METADATA and WHEEL read and edited (:mod:`.wheelmeta`),
deflate in joinable pieces (:mod:`.rawdeflate`) and its cache (:mod:`.deflatecache`), the one
safe pass over a wheel's members (:mod:`.analyze`) and what a torch wheel says it was built
with (:mod:`.torchinfo`)."""
