"""``rocm-build config``: every resolved setting and where it came from."""

from __future__ import annotations

from rocm_build.cli import options as o
from rocm_build.cli.render import State, out_console, pass_state, show_settings
from rocm_build.common.masking import mask_url, mask_values


@o.command("config")
@pass_state
def command(state: State) -> None:
    """Show every resolved setting and where it came from."""
    cfg = state.context().settings
    if state.json:
        state.emit(mask_values(cfg.as_json()))
        return
    # The settings are this command's output: stdout, so `rocm-build config | grep depth` works.
    show_settings(cfg, only_changed=False, console=out_console)
    out_console.print("projects:")
    for name, spec in cfg.projects.items():
        ref = cfg.trains.get(cfg.general.train, {}).get(name, "")
        out_console.print(
            f"  {name}: {mask_url(spec.origin)} {spec.ref or ref or '(no ref in train)'}"
        )
