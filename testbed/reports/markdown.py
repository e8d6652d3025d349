"""The Markdown of a run's ``report.md`` as HTML, for the results pages: the subset the
reports write (headings, paragraphs, lists, tables, fenced code, images, links, bold,
emphasis, inline code), every character of the text escaped, so that nothing a scenario
put into its report (a description, a name) becomes markup. A link or image goes where
``resolve`` says (a file of the results folder), else its text is shown as text.

>>> html = to_html("# A <b>run</b>\\n\\nSee **p99** and `x<y`.\\n\\n![plot](p.png)\\n",
...                lambda url, image: "/r/" + url if image else None)
>>> print(html)
<h1>A &lt;b&gt;run&lt;/b&gt;</h1>
<p>See <strong>p99</strong> and <code>x&lt;y</code>.</p>
<p><img src="/r/p.png" alt="plot"></p>
>>> print(to_html("| a | b \\\\| c |\\n|---|---|\\n| 1 | <i> |\\n", lambda u, i: None))
<table>
<thead><tr><th>a</th><th>b | c</th></tr></thead>
<tbody>
<tr><td>1</td><td>&lt;i&gt;</td></tr>
</tbody>
</table>
>>> to_html("[x](javascript:alert(1))", lambda u, i: None)
'<p>[x](javascript:alert(1))</p>'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import escape

#: (url, is an image) -> the URL to use, or None: the link or image is shown as text
Resolve = Callable[[str, bool], str | None]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.*)$")
BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
NUMBERED = re.compile(r"^(\s*)\d{1,9}[.)]\s+(.*)$")
RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
#: (a link's text, its target: bounded and bracket-free, so that a line of a thousand
#: unclosed brackets costs no more than its length)
INLINE = re.compile(
    r"(?P<code>`+)(?P<code_text>.+?)(?P=code)"
    r"|!\[(?P<alt>[^\[\]]{0,300})\]\((?P<src>[^()\[\]\s]{1,2000})\)"
    r"|\[(?P<text>[^\[\]]{1,300})\]\((?P<href>[^()\[\]\s]{1,2000})\)"
    r"|\*\*(?P<strong>.+?)\*\*"
    r"|(?<![\w*])\*(?P<em>[^*\s](?:[^*]*[^*\s])?)\*(?![\w*])")


def inline(text: str, resolve: Resolve) -> str:
    """One line's inline Markdown as HTML; all of its text escaped."""
    out, at = [], 0
    for m in INLINE.finditer(text):
        out.append(escape(text[at:m.start()]))
        at = m.end()
        if m["code"]:
            out.append(f"<code>{escape(m['code_text'].strip())}</code>")
        elif m["src"] is not None:
            url = resolve(m["src"], True)
            out.append(f'<img src="{escape(url)}" alt="{escape(m["alt"])}">' if url
                       else escape(m[0]))
        elif m["href"] is not None:
            url = resolve(m["href"], False)
            out.append(f'<a href="{escape(url)}" rel="noreferrer">'
                       f'{inline(m["text"], resolve)}</a>' if url else escape(m[0]))
        elif m["strong"] is not None:
            out.append(f"<strong>{inline(m['strong'], resolve)}</strong>")
        else:
            out.append(f"<em>{inline(m['em'], resolve)}</em>")
    out.append(escape(text[at:]))
    return "".join(out)


def _cells(line: str) -> list[str]:
    """A table row's cells (``\\|`` is a pipe inside a cell)."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


#: block quotes inside block quotes at most (deeper ones stay text)
MAX_QUOTES = 8


def to_html(text: str, resolve: Resolve, depth: int = 0) -> str:
    """``text`` (Markdown) as HTML."""
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    paragraph: list[str] = []
    i = 0

    def flush() -> None:
        if paragraph:
            out.append(f"<p>{inline(' '.join(s.strip() for s in paragraph), resolve)}</p>")
            paragraph.clear()

    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            flush()
            fence = FENCE.match(line)[1]
            body = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                body.append(lines[i])
                i += 1
            out.append(f"<pre><code>{escape(chr(10).join(body))}</code></pre>")
            i += 1
            continue
        if not line.strip():
            flush()
            i += 1
            continue
        heading = HEADING.match(line)
        if heading:
            flush()
            level = len(heading[1])
            title = heading[2].rstrip().rstrip("#").rstrip()  # a closing run of #s
            out.append(f"<h{level}>{inline(title, resolve)}</h{level}>")
            i += 1
            continue
        if RULE.match(line) and not paragraph:
            out.append("<hr>")
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and TABLE_SEPARATOR.match(lines[i + 1]):
            flush()
            head = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append("<table>")
            out.append("<thead><tr>" + "".join(f"<th>{inline(c, resolve)}</th>" for c in head)
                       + "</tr></thead>")
            out.append("<tbody>")
            for row in rows:
                row = (row + [""] * len(head))[:max(len(head), len(row))]
                out.append("<tr>" + "".join(f"<td>{inline(c, resolve)}</td>" for c in row)
                           + "</tr>")
            out.append("</tbody>")
            out.append("</table>")
            continue
        if line.lstrip().startswith(">") and depth < MAX_QUOTES:
            flush()
            quoted = []
            while i < len(lines) and lines[i].lstrip().startswith(">"):
                quoted.append(lines[i].lstrip()[1:].removeprefix(" "))
                i += 1
            out.append(f"<blockquote>{to_html(chr(10).join(quoted), resolve, depth + 1)}"
                       "</blockquote>")
            continue
        item = BULLET.match(line) or NUMBERED.match(line)
        if item and not paragraph:
            tag = "ul" if BULLET.match(line) else "ol"
            pattern = BULLET if tag == "ul" else NUMBERED
            items: list[list[str]] = []
            while i < len(lines) and lines[i].strip():
                m = pattern.match(lines[i])
                if m:
                    items.append([m[2]])
                elif lines[i].startswith((" ", "\t")) and items:
                    items[-1].append(lines[i])  # a continuation of the item above
                else:
                    break
                i += 1
            out.append(f"<{tag}>")
            out += [f"<li>{inline(' '.join(s.strip() for s in it), resolve)}</li>"
                    for it in items]
            out.append(f"</{tag}>")
            continue
        paragraph.append(line)
        i += 1
    flush()
    return "\n".join(out)
