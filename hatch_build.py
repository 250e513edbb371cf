"""Build hook: compile the optional C accelerator ``amqp_sansio._speedups``.

Hatchling runs this for wheels and editable installs. It compiles
``src/amqp_sansio/_speedups.c`` next to the source with the compiler and flags Python itself was
built with (``sysconfig``), or the ones the environment names as setuptools honours them:
``LDSHARED`` (the whole link command), else ``CC`` (the compiler in it), and ``CFLAGS``. With
``AMQP_SANSIO_NO_EXTENSIONS`` set it does not try; when the compiler is missing or fails it says
so. Either way the package stays pure Python: ``amqp_sansio._table`` works without it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
from pathlib import Path

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def _link_command() -> list[str]:
    """The compiler and linker invocation, from the environment first, as setuptools reads it."""
    link = shlex.split(
        os.environ.get("LDSHARED") or sysconfig.get_config_var("LDSHARED") or "cc -shared"
    )
    compiler = os.environ.get("CC")
    if compiler and not os.environ.get("LDSHARED"):
        link = [*shlex.split(compiler), *link[1:]]
    flags = os.environ.get("CFLAGS", sysconfig.get_config_var("CFLAGS") or "")
    return [*link, *shlex.split(flags)]


class SpeedupsBuildHook(BuildHookInterface[BuilderConfig]):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, object]) -> None:
        if self.target_name != "wheel" or os.environ.get("AMQP_SANSIO_NO_EXTENSIONS"):
            return
        source = Path(self.root, "src", "amqp_sansio", "_speedups.c")
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        target = source.with_name(f"_speedups{suffix}")
        command = [
            *_link_command(),
            sysconfig.get_config_var("CCSHARED") or "-fPIC",
            f"-I{sysconfig.get_paths()['include']}",
            str(source),
            "-o",
            str(target),
        ]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            self.app.display_warning(
                f"amqp_sansio._speedups not built, field tables decode in pure Python: {detail}"
            )
            return
        if version != "editable":  # an editable install imports it from src/ as it is
            force_include = build_data["force_include"]
            assert isinstance(force_include, dict)
            force_include[str(target)] = f"amqp_sansio/{target.name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
