"""The planning reports' HTML page from their Markdown subset (experiments/planning/html_page.py)."""
from __future__ import annotations

import base64

from experiments.planning.html_page import markdown_page


def test_markdown_subset_as_one_page(tmp_path):
    png = b"\x89PNG"
    (tmp_path / "plot.png").write_bytes(png)
    lines = ["# xPyD search: m", "", "Ranking: **A** leads, `x < y`.", "- one", "- two",
             "| layout | req/s |", "|---|---|", "| A | 1.5 |", "| B <b> | 2 |", "",
             "```bash", "vllm serve m --kv-transfer-config '{\"kv_role\": \"kv_both\"}'", "```",
             "![goodput](plot.png)", "![missing](none.png)"]
    page = markdown_page(lines, "xPyD search: m", tmp_path)
    body = page.split("<body>")[1]
    assert body == (
        "<h1>xPyD search: m</h1>"
        "<p>Ranking: <b>A</b> leads, <code>x &lt; y</code>.</p>"
        "<ul><li>one</li><li>two</li></ul>"
        '<div class="wrap"><table><tr><th>layout</th><th>req/s</th></tr>'
        "<tr><td>A</td><td>1.5</td></tr><tr><td>B &lt;b&gt;</td><td>2</td></tr></table></div>"
        "<pre><code>vllm serve m --kv-transfer-config &#x27;{&quot;kv_role&quot;: &quot;kv_both&quot;}&#x27;</code></pre>"
        f'<img alt="goodput" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        "<p>![missing](none.png)</p>"  # a file that is not there stays text
        "</body></html>\n")
    assert page.startswith("<!doctype html>") and "<title>xPyD search: m — sarathi-sim</title>" in page
