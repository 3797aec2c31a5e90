"""The ROCm tree: find and validate it, compose the build environment from it (:mod:`.dist`),
download one (:mod:`.distfetch`), assemble one from Debian's packages (:mod:`.debtree`,
:mod:`.debindex`) and run commands in a Debian sid root (:mod:`.sysroot`)."""
