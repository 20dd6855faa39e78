"""HTML of the planning reports: the style sheet and inline markup shared by the sweep's report
(`experiments.planning.report`) and the xPyD search's (`experiments.planning.disaggregation`),
and a page from the small Markdown subset the xPyD report writes."""
from __future__ import annotations

import base64
import html
import re
from pathlib import Path

CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;line-height:1.4}
table{border-collapse:collapse;margin:.5em 0 1em}.wrap{overflow-x:auto}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left;max-width:28em;overflow-wrap:anywhere}
tr.best td{background:#e3f4e6;font-weight:bold}td.miss{background:#fbe1df;color:#a11}
code{background:#f3f3f3;padding:1px 3px;overflow-wrap:anywhere}img{max-width:100%;display:block;margin:1em 0}
pre{background:#f3f3f3;padding:.5em;overflow-x:auto}.legend{color:#555}"""

_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


def inline(text: str) -> str:
    """Escape for HTML, then Markdown's **bold** and `code` as <b> and <code>."""
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


def image_tag(path: Path, alt: str) -> str:
    """An <img> with the PNG at `path` embedded (base64), so the page is one file."""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}">'


def markdown_page(lines: list[str], title: str, folder: Path) -> str:
    """A standalone HTML page of Markdown `lines` in the subset the xPyD report writes: `# ` and `## `
    headings, paragraphs (a line each), `- ` items, ```` ``` ```` fenced code, pipe tables (the
    second row the `---` separator) and `![alt](file)` images, read from `folder` and embedded.
    Inline **bold** and `code` as `inline`; everything else escaped."""
    body: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            body.append("<pre><code>" + html.escape("\n".join(lines[i + 1:end])) + "</code></pre>")
            i = end + 1
            continue
        if line.startswith("|"):
            end = next((j for j in range(i, len(lines)) if not lines[j].startswith("|")), len(lines))
            body.append(_table(lines[i:end]))
            i = end
            continue
        if line.startswith("- "):
            end = next((j for j in range(i, len(lines)) if not lines[j].startswith("- ")), len(lines))
            body.append("<ul>" + "".join(f"<li>{inline(item[2:])}</li>" for item in lines[i:end]) + "</ul>")
            i = end
            continue
        image = _IMAGE.fullmatch(line.strip())
        if image and (folder / image.group(2)).is_file():
            body.append(image_tag(folder / image.group(2), image.group(1)))
        elif line.startswith("## "):
            body.append(f"<h2>{inline(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{inline(line[2:])}</h1>")
        elif line.strip():
            body.append(f"<p>{inline(line)}</p>")
        i += 1
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)} — sarathi-sim</title>\n'
            f"<style>{CSS}</style>\n</head><body>{''.join(body)}</body></html>\n")


def _table(rows: list[str]) -> str:
    """A pipe table's rows (header, `---` separator, body) as an HTML table."""
    cells = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
    head = "".join(f"<th>{inline(c)}</th>" for c in cells[0])
    body = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>" for row in cells[2:])
    return f'<div class="wrap"><table><tr>{head}</tr>{body}</table></div>'
