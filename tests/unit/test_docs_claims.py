"""The user pages' claims checked against the tree: tables render (a header row), a
cross-reference names a section that exists, a ``testbed`` command and its flags are in the
CLI's parser, a tool a lab guide's commands use is installed by set-up, the package lists
match ``scripts/packages.txt``, every scenario and lesson is listed, and two pages that give
figures of one measurement give the same run's or name the runs (``docs/figures.yaml``)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import yaml

from testbed.core import reference
from testbed.core.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


def user_pages(root: Path = REPO) -> list[Path]:
    """The pages users read: the README, the docs site's pages, the lab guides and the
    teacher notes (the changelog and the contributors' guide are not among them)."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md")),
            *sorted((root / "labs").rglob("*.md"))]


def name(page: Path) -> str:
    return page.relative_to(REPO).as_posix() if page.is_relative_to(REPO) else page.name


def outside_fences(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return lines


def code(text: str) -> list[str]:
    """The lines of fenced blocks and every inline code span."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced:
            found.append(line.strip())
    found += re.findall(r"`([^`\n]+)`", "\n".join(outside_fences(text)))
    return found


# -- tables ------------------------------------------------------------------------------

def headless_tables(text: str) -> list[int]:
    """Line numbers (1-based) of Markdown tables whose second line is not a header
    separator (``|---|---|``): such a table renders as plain text."""
    lines = outside_fences(text)
    bad = []
    for i, line in enumerate(lines):
        starts = line.lstrip().startswith("|") and (i == 0 or not
                                                     lines[i - 1].lstrip().startswith("|"))
        if starts:
            below = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if not re.fullmatch(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?", below):
                bad.append(i + 1)
    return bad


def test_every_table_of_a_user_page_has_a_header_row():
    assert {name(p): headless_tables(p.read_text()) for p in user_pages()
            if headless_tables(p.read_text())} == {}


def test_the_table_check_finds_a_table_without_a_header_row():
    assert headless_tables("text\n\n| a | b |\n| c | d |\n") == [3]
    assert headless_tables("| a | b |\n|---|:--:|\n| c | d |\n") == []
    assert headless_tables("```\n| not | a table |\n```\n") == []


# -- cross-references --------------------------------------------------------------------

def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", title.lower().replace("`", "")).strip()


def headings(page: Path) -> set[str]:
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*$",
                                        "\n".join(outside_fences(page.read_text())), re.M)}


def nav_titles() -> set[str]:
    titles: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                titles.add(slug(key))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    config = (REPO / "mkdocs.yml").read_text()
    walk(yaml.safe_load(config[config.index("\nnav:"):])["nav"])
    return titles


def missing_sections(page: Path, text: str, known: set[str]) -> list[str]:
    """The sections a page sends the reader to that do not exist: ``see "Title"`` and
    ``"Title" below/above`` name a heading or a page of the site; ```file.md`, section
    "Title"`` a heading of that file."""
    prose = "\n".join(outside_fences(text))
    bad = []
    for title in re.findall(r'\bsee "([^"]+)"', prose) + \
            re.findall(r'"([^"]{5,})" (?:below|above)\b', prose):
        if slug(title) not in known | headings(page):
            bad.append(title)
    for file, title in re.findall(r'`([\w./-]+\.md)`,?\s+section\s+"([^"]+)"', prose):
        target = REPO / file
        if not target.exists() or slug(title) not in headings(target):
            bad.append(f"{file}: {title}")
    return bad


def test_every_cross_reference_names_a_section_that_exists():
    known = nav_titles() | {h for p in user_pages() for h in headings(p)}
    assert {name(p): missing_sections(p, p.read_text(), known) for p in user_pages()
            if missing_sections(p, p.read_text(), known)} == {}


def test_the_cross_reference_check_finds_a_missing_section():
    page = REPO / "docs" / "testing.md"
    assert missing_sections(page, 'Run it (see "Lab VM, booted here").', {"the lab vm"}) == \
        ["Lab VM, booted here"]
    assert missing_sections(page, 'Run it (see "The lab VM").', {"the lab vm"}) == []
    assert missing_sections(page, 'In `docs/topologies.md`, section "No such table".',
                            set()) == ["docs/topologies.md: No such table"]


# -- commands and flags ------------------------------------------------------------------

def _options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def unknown_commands(text: str) -> list[str]:
    """Each ``testbed COMMAND [--flag ...]`` in a page's code whose command, or one of whose
    flags, the CLI's parser does not have. Placeholders (``LAB``, ``...``) are not
    checked; what follows ``--`` or a host of ``testbed exec`` is the host's command."""
    parser = build_parser()
    commands = reference._subcommands(parser)
    bad = []
    for line in code(text):
        line = re.sub(r"\s#.*", "", line)
        line = re.sub(r"\b(?:from|import) testbed\b", "", line)  # Python, not the CLI
        for match in re.finditer(r"(?:^|[\s;&|($])(?:\S*/)?testbed ([a-z][a-z-]*)(?=\s|$)"
                                 r"([^|;&)]*)", line):
            command, rest = match.group(1), match.group(2)
            if command not in commands:
                bad.append(f"testbed {command}")
                continue
            sub = commands[command]
            try:
                words = shlex.split(rest.split(" -- ")[0])
            except ValueError:
                words = rest.split()
            nested = [a for a in sub._actions if a.choices and isinstance(a.choices, dict)]
            if nested and words and words[0] in nested[0].choices:
                sub = nested[0].choices[words[0]]
                words = words[1:]
            if command == "exec":
                words = words[:2]
            for word in words:
                flag = word.strip("[]").split("=")[0]
                if re.fullmatch(r"--?[a-zA-Z][\w-]*", flag) and \
                        flag not in _options(sub) | _options(parser):
                    bad.append(f"testbed {command} {flag}")
    return bad


def test_every_testbed_command_and_flag_of_a_user_page_is_in_the_parser():
    checked = sum(len(re.findall(r"testbed [a-z]", " ".join(code(p.read_text()))))
                  for p in user_pages())
    assert checked > 300
    assert {name(p): unknown_commands(p.read_text()) for p in user_pages()
            if unknown_commands(p.read_text())} == {}


def test_the_command_check_finds_a_command_and_a_flag_the_parser_lacks():
    assert unknown_commands("```\ntestbed launch x\ntestbed run x --fast\n```\n") == \
        ["testbed launch", "testbed run --fast"]
    assert unknown_commands("`testbed run fat-tree --seeds 1,2` and "
                            "`testbed exec lf n0 -- ping -c3 x`, "
                            "`testbed results serve --port 9000`, "
                            "`from testbed import results`") == []


# -- tools the lab guides use ------------------------------------------------------------

#: the commands of each package ``scripts/packages.txt`` installs
PACKAGE_COMMANDS = {
    "mininet": {"mn"}, "openvswitch-switch": {"ovs-vsctl", "ovs-ofctl", "ovs-appctl",
                                              "ovs-dpctl"},
    "iperf3": {"iperf3"}, "tcpdump": {"tcpdump"}, "tcpreplay": {"tcpreplay"},
    "tshark": {"tshark"}, "ethtool": {"ethtool"}, "iproute2": {"ip", "tc", "ss", "bridge"},
    "openssh-client": {"ssh", "scp"}, "iputils-ping": {"ping"},
    "net-tools": {"ifconfig", "netstat", "arp"}, "nftables": {"nft"}, "frr": {"vtysh"},
    "nginx": {"nginx"}, "prometheus": {"prometheus"}, "curl": {"curl"}, "jq": {"jq"},
    "python3": {"python3", "python"}, "make": {"make"},
}
#: what every Debian or Ubuntu system has, the lab's own commands and the shell's words
BASE = {"cd", "ls", "cat", "grep", "sed", "awk", "head", "tail", "sort", "uniq", "wc", "cut",
        "cp", "mv", "rm", "mkdir", "echo", "export", "sudo", "sleep", "diff", "tee", "find",
        "for", "do", "done", "while", "if", "then", "fi", "test", "true", "watch", "less",
        "tr", "xargs", "date", "kill", "ps", "env", "tar", "sha256sum", "git", "nproc",
        "free", "df", "du", "id", "uname", "touch", "printf", "set", "source", "exit",
        "wait", "testbed", ".venv/bin/testbed", ".venv/bin/python", "vagrant", "bash", "sh"}


def lab_tools(text: str) -> set[str]:
    """The programs a lab guide's shell blocks run: each command's first word, also after
    ``|``, ``&&``, ``;``, ``$(`` and ``sudo``."""
    tools, fenced, shell = set(), False, False
    for line in text.replace("\\\n", " ").splitlines():
        if line.lstrip().startswith("```"):
            shell = not fenced and line.strip().strip("`") in ("sh", "bash", "console", "")
            fenced = not fenced
            continue
        if not (fenced and shell):
            continue
        line = re.sub(r"(^|\s)#.*", "", line).strip().removeprefix("$ ")
        line = re.sub(r"'[^']*'", "", line).replace('"', "").replace("$(", "; ")
        for part in re.split(r"\|\|?|&&|;", line):
            words = [w for w in part.split() if not re.fullmatch(r"\w+=\S*", w)]
            while words and words[0] in ("sudo", "env", "time"):
                words = words[1:]
            if words and re.fullmatch(r"[\w./-]+", words[0]) and not words[0].isupper():
                tools.add(words[0])
    return tools


def installed_commands() -> set[str]:
    packages = [line for line in (REPO / "scripts" / "packages.txt").read_text().splitlines()
                if line and not line.startswith("#")]
    return BASE.union(*(PACKAGE_COMMANDS.get(p, set()) for p in packages))


def test_every_tool_a_lab_guide_runs_is_installed_by_set_up():
    have = installed_commands()
    guides = sorted((REPO / "labs").glob("lab*/README.md"))
    assert len(guides) == 10
    used = {name(g): lab_tools(g.read_text()) for g in guides}
    assert {"ping", "testbed", ".venv/bin/testbed"} & set().union(*used.values())
    assert {guide: sorted(tools - have) for guide, tools in used.items() if tools - have} == {}


def test_the_tool_check_finds_a_tool_set_up_does_not_install():
    tools = lab_tools("```sh\njq -r .cache f | sort | uniq -c\n"
                      "curl -s \"$(testbed dashboard lw)\" | grep x\n```\n")
    assert tools == {"jq", "sort", "uniq", "curl", "grep", "testbed"}
    assert "nmap" not in installed_commands()
    assert sorted(lab_tools("```sh\nnmap -sn 10.0.0.0/24\n```\n") - installed_commands()) == \
        ["nmap"]


# -- lists the pages keep ----------------------------------------------------------------

def test_the_package_lists_of_the_readme_and_the_install_page_are_set_ups():
    packages = [line for line in (REPO / "scripts" / "packages.txt").read_text().splitlines()
                if line and not line.startswith("#")]
    for page in (REPO / "README.md", REPO / "docs" / "install.md"):
        listed = re.search(r"Set-up installs, when missing: `([^`]+)`", page.read_text())
        assert listed, name(page)
        assert listed.group(1).split() == packages, name(page)


def test_the_scenarios_page_lists_every_scenario():
    text = (REPO / "docs" / "scenarios.md").read_text()
    rows = set(re.findall(r"^\| `([\w-]+)` \|", text, re.M))
    assert rows == {p.stem for p in (REPO / "scenarios").glob("*.yaml")}


def test_the_readme_and_the_docs_index_link_every_lesson():
    lessons = {p.name for p in (REPO / "docs" / "lessons").glob("*.md")}
    assert len(lessons) >= 6
    for page, prefix in ((REPO / "README.md", "docs/lessons/"),
                         (REPO / "docs" / "index.md", "lessons/")):
        linked = set(re.findall(rf"\]\({re.escape(prefix)}([\w-]+\.md)\)", page.read_text()))
        assert lessons <= linked, (name(page), sorted(lessons - linked))


# -- one measurement, one run's figures --------------------------------------------------

def figure_conflicts(figures: dict, read) -> list[str]:
    """Where pages disagree about a measurement of ``docs/figures.yaml`` without saying why.

    A page shows a run of a measurement when all of that run's values appear in it. Each
    page of a measurement must show one of its runs; a run with a record (``docs/img/runs``)
    names the record's machine; and when the pages of one measurement show different runs,
    every page names each run it shows by its date and machine, so a reader sees that the
    figures come from different runs."""
    bad = []
    for measurement, entry in figures.items():
        runs = entry["runs"]
        shown = {}
        for page in entry["pages"]:
            text = re.sub(r"\s+", " ", read(page))
            shown[page] = [run for run, about in runs.items()
                           if all(re.search(rf"(?<![\d.]){re.escape(str(v))}(?![\d])", text)
                                  for v in about["values"])]
            if not shown[page]:
                bad.append(f"{measurement}: {page} shows none of its runs")
        for run, about in runs.items():
            if "record" in about:
                record = json.loads(read(about["record"]))
                if about["machine"] not in record["machine"]:
                    bad.append(f"{measurement}: run {run} on {about['machine']}, its record "
                               f"says {record['machine']}")
        if len({tuple(r) for r in shown.values()}) > 1:
            for page, seen in shown.items():
                text = re.sub(r"\s+", " ", read(page))
                for run in seen:
                    if str(run) not in text or runs[run]["machine"] not in text:
                        bad.append(f"{measurement}: {page} does not name run {run} "
                                   f"({runs[run]['machine']})")
    return bad


def load_figures() -> dict:
    return yaml.safe_load((REPO / "docs" / "figures.yaml").read_text())


def test_pages_giving_figures_of_one_measurement_agree_or_name_their_runs():
    figures = load_figures()
    assert figures
    assert figure_conflicts(figures, lambda path: (REPO / path).read_text()) == []


def test_the_figure_check_finds_two_pages_with_different_unexplained_figures():
    figures = {"goodput": {"pages": ["a.md", "b.md"], "runs": {
        "2026-11-30": {"machine": "AMD EPYC", "values": [121.5, 165.6]},
        "2026-12-03": {"machine": "Intel Xeon", "values": [117, 204]}}}}
    pages = {"a.md": "ECMP 121.5, adaptive 165.6 Mb/s.",
             "b.md": "ECMP reached 117 Mb/s and adaptive 204 on 2026-12-03 (Intel Xeon)."}
    assert figure_conflicts(figures, pages.__getitem__) == [
        "goodput: a.md does not name run 2026-11-30 (AMD EPYC)"]
    pages["a.md"] = "On 2026-11-30 (AMD EPYC): ECMP 121.5, adaptive 165.6 Mb/s."
    assert figure_conflicts(figures, pages.__getitem__) == []
    pages["a.md"] = "ECMP 120, adaptive 170."
    assert figure_conflicts(figures, pages.__getitem__) == ["goodput: a.md shows none of its runs"]


# -- voice -------------------------------------------------------------------------------

#: phrases of a development log: whose work a figure came from ("the issue's run", "my
#: own tests"), which session or round of development, which numbered run was flagged,
#: what earlier runs exposed. They belong in the changelog or docs/design-notes.md.
DEVELOPMENT_LOG = [r"\bthe issue'?s\b", r"\bissue #?\d+", r"\bthis (?:stop|session)\b",
                   r"\bmy own\b", r"\bsession \d+", r"\bround [1-9]\b(?![.,]?\d)",
                   # "run 1 was flagged", not a list's "then run\n1." nor "run 1,066 ms"
                   r"\bruns? [1-9]\b(?![.,]?\d)(?!\.\s)", r"\bwhat earlier runs\b",
                   r"\bearlier runs beside\b", r"\beach fixed\b", r"\bafter the fidelity fix\b"]


def development_log(text: str) -> list[str]:
    """The development-log phrases of a page, each with the words around it."""
    flat = re.sub(r"\s+", " ", text)
    return [flat[max(0, m.start() - 30):m.end() + 30] for pattern in DEVELOPMENT_LOG
            for m in re.finditer(pattern, flat, re.I)]


def test_user_pages_speak_to_users_not_of_the_lab_s_development():
    pages = [p for p in user_pages() if p.name != "design-notes.md"]
    assert any(p.match("labs/*/solution/NOTES.md") for p in pages)
    assert {name(p): development_log(p.read_text()) for p in pages
            if development_log(p.read_text())} == {}


#: what no page says, the contributors' design notes included: which issue, session or
#: stop, or "this machine" instead of the hardware a figure was measured on
NEVER = [r"\bthe issue'?s\b", r"\bissue #?\d+", r"\bthis (?:stop|session|machine)\b",
         r"\bsession \d+"]


def test_no_page_names_an_issue_a_session_or_this_machine():
    found = {name(p): [m.group(0) for pattern in NEVER
                       for m in re.finditer(pattern, re.sub(r"\s+", " ", p.read_text()), re.I)]
             for p in user_pages()}
    assert any(p.name == "design-notes.md" for p in user_pages())
    assert {k: v for k, v in found.items() if v} == {}


def test_the_voice_check_finds_the_development_log_s_phrases():
    for line in ("The fidelity monitor flagged every variant of run 1 (my own unit tests ran "
                 "beside it for part of it)",
                 "What earlier runs there exposed, each fixed: a DCTCP test",
                 "the issue's 128-switch run took 12 min 23 s and 9.5 GB",
                 "## Session 8: pacing and spreading", "as of round 3 of this session"):
        assert development_log(line), line
    assert development_log("The first run takes about 100 s; run it on a quiet host, "
                           "round the rate up to 2.5 Mb/s.") == []
