"""Shared services every layer uses: gfx target names (:mod:`.arch`), errors and exit codes
(:mod:`.errors`), processes (:mod:`.proc`), locks, state files and temporary files written into
place (:mod:`.locks`, :mod:`.statefile`, :mod:`.tempfiles`), fault points (:mod:`.faults`),
masking of credentials (:mod:`.masking`), progress (:mod:`.progress`), sizes (:mod:`.sizes`) and
safe paths inside a tree (:mod:`.treepath`). They import nothing of rocm-build's outside this
package: every other package sits above them."""
