"""Start the fabric controller: ``python -m controllers --spec FILE --port N``.

``--config`` (the scenario's resolved ``controller`` section as JSON) chooses the
routing mode and ECN marking; ``--telemetry`` names the JSON-lines file of port samples.

os-ken 4.x ships no manager command, so this sets its configuration and runs the app
with ``AppManager.run_apps``. It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

#: the routing base (proactive, survives the controller) and the congestion overlay
BASE_APP = "controllers.fabric_app"
#: the routing base with failure handling (any failover flag selects it)
FAILOVER_APP = "controllers.failover_app"
CONGESTION_APP = "controllers.congestion_app"
MODES = ("ecmp", "adaptive", "spray")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controllers")
    parser.add_argument("--spec", required=True, help="topology spec JSON")
    parser.add_argument("--port", type=int, required=True, help="OpenFlow TCP port")
    parser.add_argument("--status", help="JSON lines of controller events")
    parser.add_argument("--mode", choices=MODES, default=None,
                        help="routing mode (default: the config's, else ecmp)")
    parser.add_argument("--config", help="controller section JSON (mode, telemetry, ecn)")
    parser.add_argument("--telemetry", help="JSON lines of port samples to write")
    parser.add_argument("--fast-failover", action="store_true",
                        help="spines forward through fast-failover groups, leaves bounce")
    parser.add_argument("--recompute", action="store_true",
                        help="recompute and reinstall paths on port-status changes")
    parser.add_argument("--health", help="health monitor JSON: {enabled, loss_threshold, "
                        "interval_ms}")
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error(f"--port: must be 1..65535, got {args.port}")
    if not os.path.exists(args.spec):
        parser.error(f"--spec: no such file {args.spec}")

    if args.config and not os.path.exists(args.config):
        parser.error(f"--config: no such file {args.config}")

    os.environ["TESTBED_SPEC"] = args.spec
    if args.config:
        os.environ["TESTBED_CONFIG"] = args.config
    if args.mode:  # overrides the config's mode (kept for callers that pass only a mode)
        os.environ["TESTBED_MODE"] = args.mode
    if args.telemetry:
        os.environ["TESTBED_TELEMETRY"] = args.telemetry
    base = BASE_APP
    if args.fast_failover or args.recompute or args.health:
        os.environ["TESTBED_FAILOVER"] = json.dumps({
            "fast_failover": args.fast_failover, "recompute": args.recompute,
            "health": json.loads(args.health) if args.health else None})
        base = FAILOVER_APP
    if args.status:
        os.environ["TESTBED_STATUS"] = args.status
    # os-ken's native hub cannot unwind run_apps (HubThread has no kill()); the app
    # holds no state that needs flushing, so leave at once.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    from os_ken import cfg
    from os_ken.base.app_manager import AppManager

    cfg.CONF(
        args=["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(args.port)],
        project="os_ken",
    )
    AppManager.run_apps([base, CONGESTION_APP])
    return 0


if __name__ == "__main__":
    sys.exit(main())
