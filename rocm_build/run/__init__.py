"""What a stage is given and what it answers: the run context (:mod:`.context`: settings, folders,
the ROCm tree and the gfx targets, decided once per command) and the stage contract
(:mod:`.stages`). Above the layers a context reads (config, rocm), below the four stages
(sources, building, bundle, smoke) and the command layer."""
