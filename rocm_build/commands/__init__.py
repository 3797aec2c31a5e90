"""The command layer: what runs several stages or looks across them for one command.

:mod:`.pipeline` (``all``: the stages in order, resumable), :mod:`.runreport` (the run report it
writes), :mod:`.doctor` (``doctor``: is this machine ready) and :mod:`.matrix` (``matrix``: the
CI jobs a set of targets and projects makes). Only the CLI imports these; they import the stages
and the layers below them, never the CLI."""
