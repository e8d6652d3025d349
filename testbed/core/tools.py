"""``testbed graph``, ``decrypt``, ``scenarios`` and ``spec``: commands that read files and
touch no host."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from testbed.errors import ConfigError
from testbed.host.naming import SPEC_PREFIX

TEXT_FORMATS = ("dot", "mermaid")


def cmd_graph(args) -> int:
    from testbed.core import scenario
    from testbed.reports import graph
    from topologies import plugins

    plugins.allow()  # the drawing is of what a plug-in builder returns
    sc = scenario.load(scenario.path_of(args.scenario))
    out = Path(args.out) if args.out else None
    fmt = args.format
    if fmt is None:
        fmt = "mermaid" if out and out.suffix in (".mmd", ".mermaid", ".md") else "dot"
    g, title = graph.scenario_graph(sc, args.variant)
    text = (graph.to_mermaid if fmt == "mermaid" else graph.to_dot)(g, title)
    if out is not None and out.suffix == ".png":
        graph.to_png(g, title, out)
        print(f"{out}: {g.number_of_nodes()} nodes, {g.number_of_edges()} links",
              file=sys.stderr)
        if args.format:
            sys.stdout.write(text)
    elif out is not None:
        out.write_text(text)
        print(f"{out}: {fmt}, {g.number_of_nodes()} nodes, {g.number_of_edges()} links",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def scenario_rows(folder: Path) -> list[tuple[str, str, str, str]]:
    """(name, kind, variants, description) of every scenario file in ``folder``; a file
    that does not validate says why instead of its variants."""
    from testbed.core import scenario

    rows = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            sc = scenario.load(path)
        except ConfigError as exc:
            rows.append((path.stem, "?", f"(does not validate: {exc})", ""))
            continue
        variants = ", ".join(v.name for v in getattr(sc, "variants", None) or ())
        rows.append((sc.name, sc.kind, variants, " ".join(sc.description.split())))
    return rows


def cmd_scenarios(args) -> int:
    from testbed import REPO
    from testbed.core import checked

    rows = scenario_rows(REPO / "scenarios")
    clean = checked.load(Path(args.checked) if args.checked else checked.CHECKED_FILE)
    if args.json:
        print(json.dumps([{**dict(zip(("name", "kind", "variants", "description"), r,
                                      strict=True)), "checked": clean.get(r[0])}
                          for r in rows], indent=1))
        return 0
    for name, kind, variants, description in rows:
        print(f"{name} ({kind})" + (f": {variants}" if variants else ""))
        if description:
            print(f"    {description}")
        print(f"    {checked.describe(clean.get(name))}")
    return 0


def cmd_spec(args) -> int:
    from testbed.core import scenario
    from topologies import plugins

    plugins.allow()  # the spec is what a plug-in builder returns
    sc = scenario.load(scenario.path_of(args.scenario))
    if sc.kind != "fabric":
        raise ConfigError("SCENARIO", f"a {sc.kind} scenario has no fabric spec (fabric "
                                      "scenarios do; testbed graph draws a backbone)")
    spec = sc.variant(args.variant).fabric(SPEC_PREFIX)
    text = json.dumps(spec.to_dict(), indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
        counts = spec.counts()
        print(f"{args.out}: {', '.join(f'{v} {k}' for k, v in counts.items())}",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_decrypt(args) -> int:
    from testbed.macsec.decrypt import decrypt_to_pcap, keys_from
    from testbed.macsec.wireshark import write_uat
    from traffic.pcapfile import PcapError

    try:
        keys = keys_from(json.loads(Path(args.keys).read_text()), Path(args.keys).parent)
    except OSError as exc:
        raise ConfigError("--keys", f"{args.keys}: {exc.strerror}") from None
    except (json.JSONDecodeError, ValueError, AttributeError) as exc:
        raise ConfigError("--keys", f"{args.keys}: {exc}") from None
    pcap = Path(args.pcap)
    if not pcap.is_file():
        raise ConfigError("PCAP", f"{pcap}: no such file")
    try:
        counts = decrypt_to_pcap(pcap, keys, Path(args.out))
    except (PcapError, KeyError, ValueError) as exc:
        raise ConfigError("PCAP", f"{pcap}: {exc}") from None
    print(f"{args.out}: {counts['decrypted']} frames decrypted, {counts['not_macsec']} not "
          f"MACsec (copied), {counts['failed']} MACsec frames no key validates (left out) "
          f"of {counts['frames']}")
    if args.wireshark:
        write_uat(keys, Path(args.wireshark))
        print(f"{args.wireshark}: the keys as Wireshark's MACsec Pre-Shared Key List")
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("graph", help="draw a scenario's topology (DOT, Mermaid, PNG)")
    p.add_argument("scenario", help="scenario name (scenarios/NAME.yaml) or file")
    p.add_argument("--variant", help="the variant to draw (default: the first)")
    p.add_argument("-o", "--out", help="FILE.png (a drawing), or a file for the text")
    p.add_argument("--format", choices=TEXT_FORMATS,
                   help="text format (default dot; with -o FILE.png also printed)")
    p.set_defaults(func=cmd_graph)

    p = sub.add_parser("scenarios", help="list the shipped scenarios with their kinds, "
                                         "variants and descriptions")
    p.add_argument("--json", action="store_true", help="the list as JSON")
    p.add_argument("--checked", help="where each was checked clean (default: "
                                     "scenarios/checked.json, written by make bench "
                                     "BENCH=clean)")
    p.set_defaults(func=cmd_scenarios)

    p = sub.add_parser("spec", help="a fabric scenario's topology spec as JSON (hosts, "
                                    "switches with datapath ids, links with ports): for a "
                                    "remote controller or a drawing")
    p.add_argument("scenario", help="scenario name (scenarios/NAME.yaml) or file")
    p.add_argument("--variant", help="the variant (default: the first)")
    p.add_argument("-o", "--out", help="write it to this file instead")
    p.set_defaults(func=cmd_spec)

    p = sub.add_parser("decrypt", help="write the plaintext of a MACsec capture")
    p.add_argument("pcap", help="the capture (e.g. a macsec run's wire.pcap)")
    p.add_argument("--keys", required=True,
                   help="macsec-keys.json, or a macsec/backbone run's manifest.json")
    p.add_argument("-o", "--out", required=True, help="plaintext pcap to write")
    p.add_argument("--wireshark", help="also write the keys as Wireshark's "
                                       "psk_config_data file here")
    p.set_defaults(func=cmd_decrypt)
