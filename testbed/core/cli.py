"""``testbed`` command line: run, validate, schema, doctor, calc, clean; labs that stay up
(up, ls, exec, cli, fault, capture, down: :mod:`testbed.lab.commands`, :mod:`testbed.lab.up`),
graph, decrypt;
check (grading a results folder against a lab guide, :mod:`testbed.reports.grading`);
start (a lab's starter copied for a student, :mod:`testbed.reports.students`);
results serve (results folders as web pages, :mod:`testbed.reports.web`).

Bad input ends with one line naming the field and the problem, exit status 2; a host
that cannot run the request ends with exit status 1; Ctrl-C or SIGTERM with 130, after
the teardown.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import sys
from pathlib import Path

from testbed.errors import ConfigError, HostError, Interrupted, TestbedError
from testbed.numbers import flag, number
from topologies.params import ParamError


def cmd_validate(args) -> int:
    from testbed.core import scenario

    name, found = scenario.validate(scenario.path_of(args.file))
    print(f"{name}: {found}")
    return 0


def cmd_schema(args) -> int:
    from testbed.core.schema import scenario_schema

    text = json.dumps(scenario_schema(), indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


def cmd_run(args) -> int:
    from testbed import experiments
    from testbed.cluster.servers import parse_all
    from testbed.core import runner, scenario
    from testbed.reports import report
    from topologies import plugins

    plugins.allow()  # a run runs the code its scenario names (validate does not)

    duration = None
    if args.duration not in (None, ""):  # make's DURATION= (empty: the file's)
        duration = number(args.duration, "DURATION", 1, 3600)
    seeds = None
    if args.seeds not in (None, ""):
        seeds = [number(s, "SEEDS", 0, MAX_SEED, integer=True) for s in args.seeds.split(",")]
    path = scenario.path_of(args.scenario)
    sc = scenario.load(path, duration_override=duration, seeds_override=seeds)
    servers = (parse_all(args.servers, "--servers") if args.servers is not None
               else parse_all(list(sc.servers)))
    fitted = None
    if args.fit:
        from testbed.cluster.fit import for_run

        fitted = for_run(path, servers)
        sc = scenario.load(path, duration_override=duration, seeds_override=seeds,
                           rate_factor=fitted.factor)
    if args.variant:
        sc = sc.only(args.variant)
    if servers and not experiments.get(sc.kind).LAB_SERVERS:
        raise ConfigError("--servers" if args.servers else "servers",
                          f"a {sc.kind} scenario runs on one machine; a fabric scenario can "
                          "be spread over several")
    for i, variant in enumerate(sc.variants if servers else ()):
        if variant.acceptance.get("enabled") or variant.acceptance.get("plant"):
            raise ConfigError(f"variants[{i}].acceptance", "a fabric over several machines "
                                                           "does not run acceptance checks yet")
    if args.monitor:
        sc = dataclasses.replace(sc, monitor=sc.monitor.model_copy(update={"prometheus": True}))
    if os.geteuid() != 0:
        raise HostError("running a scenario needs root (namespaces, Open vSwitch)")
    results_root = Path(args.results)
    out = Path(args.out) if args.out else runner.default_out(results_root, sc.name)
    if args.out and out.exists() and any(out.iterdir()):
        raise ConfigError("OUT", f"{out} exists and is not empty")
    summary = runner.run(sc, out, monitor=not args.no_fidelity, servers=tuple(servers),
                         fit=fitted.to_dict() if fitted else None)
    if not args.out:
        runner.link_latest(results_root, out)
    print()
    print(report.table(summary))
    for line in report.untrusted(summary):  # the fidelity monitor's flags, for every kind
        print(f"warning: {line}")
    print()
    print(f"results: {out}  (report.md, summary.json and plots)")
    return 0


def cmd_doctor(args) -> int:
    from testbed.host.capabilities import format_report, probe

    if os.geteuid() != 0:
        raise HostError("doctor needs root (the probe creates a test namespace)")
    caps = probe()
    print(json.dumps(caps.to_dict(), indent=2) if args.json else format_report(caps))
    return 0


def cmd_calc(args) -> int:
    from topologies.calculator import calculate, format_table

    if args.scenario:
        return _calc_machines(args)
    for name, value in (("--switch-tbps", args.switch_tbps), ("--gpu-gbps", args.gpu_gbps),
                        ("--planes", args.planes)):
        if value is None:
            raise ConfigError(name, "required for a fabric's reach (or --scenario: how many "
                                    "machines a scenario needs)")
    result = calculate(switch_tbps=args.switch_tbps, gpu_gbps=args.gpu_gbps, planes=args.planes,
                       lane_gbps=args.lane_gbps)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


def _calc_machines(args) -> int:
    """How many machines of ``--cores`` a scenario's variant needs (or how it fares on
    ``--machines``), from the costs measured by ``make bench BENCH=sizing``."""
    from testbed.cluster import sizing
    from testbed.core import scenario
    from testbed.host.naming import SPEC_PREFIX
    from topologies import plugins

    plugins.allow()  # the fabric is what a plug-in builder returns (as testbed spec)
    if args.cores < 1:
        raise ConfigError("--cores", f"must be at least 1, got {args.cores}")
    if args.machines is not None and not 1 <= args.machines <= sizing.MAX_MACHINES:
        raise ConfigError("--machines", f"must be 1 to {sizing.MAX_MACHINES}, got "
                                        f"{args.machines}")
    sc = scenario.load(scenario.path_of(args.scenario))
    if sc.kind != "fabric":
        raise ConfigError("--scenario", f"a {sc.kind} scenario: the sizing model knows "
                                        "fabric scenarios only")
    variant = sc.variant(args.variant)
    try:
        costs = sizing.Costs.load(args.costs) if args.costs else sizing.Costs.load()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError("--costs", f"{args.costs or sizing.COSTS_FILE}: not a costs file "
                                     f"(make bench BENCH=sizing writes one): {exc}") from None
    spec = variant.fabric(SPEC_PREFIX)
    est = (sizing.estimate(spec, variant, costs, machines=args.machines, cores=args.cores)
           if args.machines else sizing.machines_needed(spec, variant, costs,
                                                        cores=args.cores))
    if args.json:
        print(json.dumps({"scenario": sc.name, "variant": variant.name,
                          "costs": dataclasses.asdict(costs), **est.to_dict()}, indent=1))
        return 0
    print(f"{sc.name} / {variant.name}: {len(spec.switches)} switches, {len(spec.hosts)} "
          f"hosts; costs measured on {costs.measured_on}")
    for line in sizing.describe(est):
        print(line)
    return 0


def cmd_clean(args) -> int:
    from testbed.cluster.servers import clean_servers
    from testbed.host.cleanup import clean
    from testbed.lab.state import all_labs

    only = set(args.run) if args.run else None
    removed, live = clean(dry_run=args.dry_run, force=args.force, only=only,
                          elsewhere=clean_servers)
    verb = "would remove" if args.dry_run else "removed"
    for item in removed:
        print(f"{verb} {item}")
    labs = {r["run_id"]: r["name"] for r in all_labs()}
    for run_id, pid in sorted(live.items()):
        what = f"lab {labs[run_id]} (run {run_id})" if run_id in labs else f"run {run_id}"
        print(f"left alone: {what}, still running (process {pid}); --force removes it")
    print(f"{len(removed)} testbed leftovers {verb}" if removed else "nothing to clean")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ai-fabric-testbed")
    except PackageNotFoundError:
        return "unknown"


#: a seed on the command line (a file's seeds are bounded by its YAML's integers)
MAX_SEED = 2**63 - 1


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are ConfigErrors, so that they end as every bad input of the
    lab's command line does: ``testbed: error: --flag: reason``, exit status 2 (no usage
    text)."""

    def error(self, message: str):  # type: ignore[override]
        field, _, reason = message.removeprefix("argument ").partition(": ")
        if not message.startswith("argument "):  # unrecognized or missing arguments
            reason = f"{reason} ({self.prog} -h: the options)"
        raise ConfigError(field, reason)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="testbed", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A network lab for AI datacenter fabrics: run scenarios, keep labs up "
                    "and step into them, grade lab guides.",
        epilog="examples:\n  testbed run                      # the default scenario\n"
               "  testbed scenarios                # what else there is\n"
               "  testbed COMMAND -h               # one command's options and examples\n"
               "\nBad input: one line naming the field, exit status 2; a host that cannot "
               "run the\nrequest: exit status 1; Ctrl-C: 130, after the teardown.")
    parser.add_argument("--version", action="version", version=f"testbed {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run a scenario and write its results")
    p.add_argument("scenario", nargs="?", default="agents-vs-training",
                   help="scenario name (scenarios/NAME.yaml) or file")
    p.add_argument("--duration", help="seconds of traffic per variant (overrides the file)")
    p.add_argument("--seeds", help="comma-separated seeds, each variant once per seed "
                                   "(overrides the file: judge on seeds it was not tuned on)")
    p.add_argument("--variant", action="append", metavar="NAME",
                   help="run only this variant (again for more; default: every variant; "
                        "fabric scenarios)")
    p.add_argument("--out", help="write results straight into this folder")
    p.add_argument("--results", default="results", help="results root (default: results)")
    p.add_argument("--servers", help="spread each fabric over these machines too, each "
                                     "[user@]host[:port], comma-separated (overrides the "
                                     "scenario's servers; docs/machines.md)")
    p.add_argument("--monitor", action="store_true", help="watch each fabric variant live: "
                   "its dashboard and metrics, and a Prometheus of the run's own, on "
                   "127.0.0.1 (the scenario's monitor key)")
    p.add_argument("--no-fidelity", action="store_true",
                   help="run without the fidelity monitor (to measure what it costs)")
    p.add_argument("--fit", action="store_true",
                   help="on a host smaller than the scenario's: scale every rate by the "
                        "largest factor at which the run is predicted clean (fabric "
                        "scenarios; said in one line, recorded in the results)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a scenario file without touching the host")
    p.add_argument("file", help="scenario file (or the name of a shipped scenario)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("schema", help="print the JSON Schema of the scenario format")
    p.add_argument("-o", "--out", help="write it to this file instead")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("doctor", help="kernel features, versions and chosen backends")
    p.add_argument("--json", action="store_true", help="the probe's findings as JSON")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("calc", help="reach of single- vs multi-plane two-tier fabrics; "
                                    "with --scenario: how many machines a lab needs")
    p.add_argument("--switch-tbps", type=flag(0, 10_000), help="switch capacity, Tb/s")
    p.add_argument("--gpu-gbps", type=flag(0, 100_000), help="bandwidth per GPU, Gb/s")
    p.add_argument("--planes", type=flag(1, 1024, integer=True),
                   help="planes the GPU's bandwidth is split over")
    p.add_argument("--lane-gbps", type=flag(0, 10_000), default=200.0,
                   help="SerDes lane speed, the smallest port (default 200)")
    p.add_argument("--scenario", help="a scenario (name or file): estimate the machines its "
                                      "variant needs with the fidelity monitor clean")
    p.add_argument("--variant", help="the variant (default: the first)")
    p.add_argument("--cores", type=flag(1, 4096, integer=True), default=os.cpu_count() or 1,
                   help="cores of each machine (default: those of the machine it runs on)")
    p.add_argument("--machines", type=flag(1, 4096, integer=True),
                   help="estimate for this many machines (default: the fewest that hold it)")
    p.add_argument("--costs", help="a costs file from make bench BENCH=sizing (default: "
                                   "the one measured on the lab's development machine)")
    p.add_argument("--json", action="store_true", help="every figure as JSON")
    p.set_defaults(func=cmd_calc)

    p = sub.add_parser("clean", help="remove what testbed runs left behind (what runs "
                                     "registered or tagged)")
    p.add_argument("--dry-run", action="store_true",
                   help="say what would be removed, remove nothing")
    p.add_argument("--force", action="store_true",
                   help="also remove runs whose process is still alive")
    p.add_argument("--run", action="append", metavar="ID",
                   help="only this run (its 4-hex-digit id; may repeat)")
    p.set_defaults(func=cmd_clean)

    from testbed.core.reference import _subcommands
    from testbed.core.tools import add_parsers as add_tool_parsers
    from testbed.lab.commands import add_parsers as add_lab_parsers
    from testbed.reports.compare import add_parsers as add_compare_parsers
    from testbed.reports.grading import add_parsers as add_grading_parsers
    from testbed.reports.students import add_parsers as add_student_parsers
    from testbed.reports.web import add_parsers as add_results_parsers

    add_lab_parsers(sub)
    add_tool_parsers(sub)
    add_grading_parsers(sub)
    add_student_parsers(sub)
    add_compare_parsers(sub)
    add_results_parsers(sub)
    for name, sub_parser in _subcommands(parser).items():
        sub_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        own = f"{sub_parser.epilog}\n\n" if sub_parser.epilog else ""  # e.g. exit statuses
        sub_parser.epilog = own + "examples:\n" + "\n".join(f"  {line}"
                                                             for line in EXAMPLES[name])
    return parser


#: what ``testbed COMMAND -h`` shows under "examples" (every command has some)
EXAMPLES = {
    "run": ["testbed run                                  # agents-vs-training",
            "testbed run fat-tree --duration 10 --seeds 4,5",
            "testbed run ecmp-vs-adaptive --fit        # rates scaled to fit this host",
            "testbed run my-scenario.yaml --out /tmp/r1"],
    "validate": ["testbed validate scenarios/lossless.yaml", "testbed validate my.yaml"],
    "schema": ["testbed schema -o scenario.schema.json    # for an editor's YAML support"],
    "doctor": ["testbed doctor", "testbed doctor --json"],
    "calc": ["testbed calc --switch-tbps 102.4 --gpu-gbps 1600 --planes 8",
             "testbed calc --scenario agents-vs-training --variant training-1to1 --cores 2",
             "testbed calc --scenario fat-tree --cores 8 --machines 2"],
    "clean": ["testbed clean --dry-run", "testbed clean", "testbed clean --run 1a2b"],
    "up": ["testbed up link-faults --variant cut-recompute --name lf",
           "testbed up agents-vs-training --traffic --duration 20",
           "testbed up backbone-failover --variant fast --name wan"],
    "ls": ["testbed ls", "testbed ls --json"],
    "inspect": ["testbed inspect lf", "testbed inspect lf --json > lf.json"],
    "accept": ["testbed accept lf                # every cable heard as the spec says?"],
    "expand": ["testbed expand lf --leaves 1 --nodes 4   # a rack: a leaf a plane, 4 nodes"],
    "dashboard": ["testbed dashboard lf             # then open the address in a browser",
                  "curl -s $(testbed dashboard lf | awk '/metrics/ {print $2}')"],
    "exec": ["testbed exec lf n0 -- ping -c3 10.0.0.8", "testbed exec lf n0   # a shell",
             "testbed exec wan us-east -- ip route"],
    "cli": ["testbed cli lf                 # Mininet's CLI", "testbed cli lf -c pingall",
            "testbed cli wan nyc -c 'show ip ospf neighbor'"],
    "fault": ["testbed fault --list", "testbed fault lf link_down p0l0-p0s1",
              "testbed fault lf degrade p0l0-p0s1 --loss 0.2",
              "testbed fault wan cut_link nyc-lon-1"],
    "capture": ["testbed capture lf p0l0e3 --seconds 5",
                "testbed capture wan nyc-lon-1:b --count 100 -o wire.pcap"],
    "down": ["testbed down lf"],
    "graph": ["testbed graph fat-tree -o ft.png", "testbed graph lossless --format mermaid"],
    "scenarios": ["testbed scenarios", "testbed scenarios --json"],
    "spec": ["testbed spec fat-tree -o ft.json",
             "testbed spec agents-vs-training --variant training-4to1"],
    "decrypt": ["testbed decrypt results/latest/wire.pcap --keys "
                "results/latest/macsec-keys.json -o plain.pcap"],
    "check": ["testbed check 1 results/latest", "make check LAB=1 RESULTS=results/latest",
              "testbed check 2 my-labs/lab02-ada --student ada   # ada's own values",
              "testbed check 9 class/*/lab09 --students roster.csv --csv lab09.csv",
              "testbed check 3 --rerun hand-ins/* --csv lab03.csv   # run them again here"],
    "start": ["testbed start 2 --student ada          # my-labs/lab02-ada/",
              "TESTBED_COURSE_SECRET=... testbed start 9 --students roster.csv --out handout"],
    "compare": ["testbed compare results/before results/after   # same scenario, two runs"],
    "results": ["testbed results serve                 # every run under results/, in a browser"],
    "results serve": ["testbed results serve                 # http://127.0.0.1:8470/",
                      "testbed results serve results/latest --port 9000",
                      "ssh -L 8470:127.0.0.1:8470 user@lab-vm   # then open it on the host"],
}


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (ConfigError, ParamError) as exc:
        print(f"testbed: error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted):
        print("testbed: interrupted; everything the run created was removed", file=sys.stderr)
        return 130
    except TestbedError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(f"testbed: no space left writing {exc.filename or 'a result file'}: what it "
              "was writing is incomplete (a run tore down what it created)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
