"""Start the fabric controller: ``python -m controllers --config FILE --port N``.

``--config`` is the one configuration file (:mod:`controllers.config`): the topology
spec, the status and telemetry files, the seed, the routing mode, ECN marking and
failure handling. The apps read it from :func:`controllers.config.active`; nothing
travels through the environment.

os-ken 4.x ships no manager command, so this sets its configuration and runs the apps
with ``AppManager.run_apps``. It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from controllers import config
from topologies import plugins
from topologies.params import ParamError

#: the routing base (proactive, survives the controller) and the congestion overlay
BASE_APP = "controllers.fabric_app"
#: the routing base with failure handling (any failover option selects it)
FAILOVER_APP = "controllers.failover_app"
CONGESTION_APP = "controllers.congestion_app"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controllers")
    parser.add_argument("--config", required=True, help="controller configuration (JSON)")
    parser.add_argument("--port", type=int, required=True, help="OpenFlow TCP port")
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error(f"--port: must be 1..65535, got {args.port}")
    if not os.path.exists(args.config):
        parser.error(f"--config: no such file {args.config}")
    cfg = config.load(args.config)
    if not os.path.exists(cfg.spec):
        parser.error(f"--config: spec: no such file {cfg.spec}")
    # os-ken's native hub cannot unwind run_apps (HubThread has no kill()); the app
    # holds no state that needs flushing, so leave at once.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    from os_ken import cfg as os_ken_cfg
    from os_ken.base.app_manager import AppManager

    os_ken_cfg.CONF(
        args=["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(args.port)],
        project="os_ken",
    )
    for folder in cfg.plugin_path:  # beside the scenario (a student's own app)
        plugins.add_folder(folder)
    plugins.allow()  # the controller runs the apps and modes its scenario names
    try:
        extra = [app_module(name) for name in cfg.apps]
    except ValueError as exc:
        parser.error(f"--config: apps: {exc}")
    AppManager.run_apps([FAILOVER_APP if cfg.failover else BASE_APP, CONGESTION_APP, *extra])
    return 0


def app_module(name: str) -> str:
    """The module os-ken loads for ``package.module[:AppClass]`` (the class, when named,
    must be an OSKenApp defined there: os-ken runs the first one a module defines).

    >>> with plugins.allowed():  # as main() allows, and a validation never does
    ...     app_module("controllers.fabric_app:FabricRouting")
    'controllers.fabric_app'
    """
    import inspect

    from os_ken.base.app_manager import OSKenApp

    module_name, _, cls_name = name.partition(":")
    try:  # found where the lab runs and beside its scenario (the one plug-in loader)
        module = plugins.load(module_name, "apps")
    except ParamError as exc:  # a plug-in being written: its syntax error, one line
        raise ValueError(exc.reason) from None
    apps = [c for _, c in inspect.getmembers(module, inspect.isclass)
            if issubclass(c, OSKenApp) and c.__module__ == module.__name__]
    if not apps:
        raise ValueError(f"{module_name!r} defines no os-ken app (an OSKenApp subclass)")
    if cls_name and cls_name not in {c.__name__ for c in apps}:
        raise ValueError(f"{module_name!r} defines no os-ken app {cls_name!r}")
    return module_name


if __name__ == "__main__":
    sys.exit(main())
