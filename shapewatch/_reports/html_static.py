"""The fixed parts of the HTML report: style, script and the page around it.

Everything is inline (no network, no fonts, no CDN), and every rule is scoped to
``.swr`` so that the same fragment can sit inside a notebook without restyling it.
"""

from __future__ import annotations

import base64
import hashlib

#: Phase colours, shared by the bars, the legend and the tooltips.
PHASE_COLORS = {"trace": "#5b8def", "lower": "#f5a524", "compile": "#e5484d"}

CSS = """
.swr{--fg:#1f2430;--muted:#667085;--line:#e4e7ec;--card:#fff;--bg:#f6f7f9;--accent:#e5484d;
 font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
 color:var(--fg);background:var(--bg);padding:20px 24px 28px;border-radius:10px;text-align:left}
.swr *{box-sizing:border-box}
.swr h1{font-size:22px;margin:0 0 2px;font-weight:650;letter-spacing:-.01em}
.swr h1 span{color:var(--accent)}
.swr h2{font-size:16px;margin:0 0 10px;font-weight:650}
.swr h3{font-size:14px;margin:14px 0 8px;font-weight:600}
.swr .sub{color:var(--muted);font-size:12.5px;margin:0 0 12px}
.swr .summary{margin:0 0 14px;font-size:14.5px}
.swr section{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:16px 18px;margin:14px 0}
.swr .stats{display:flex;flex-wrap:wrap;gap:10px}
.swr .stat{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 16px;min-width:150px}
.swr .stat b{display:block;font-size:22px;font-weight:650}
.swr .stat.hot b{color:var(--accent)}
.swr .stat span{color:var(--muted);font-size:12px}
.swr .note{color:var(--muted);font-size:12.5px;margin:6px 0 0}
.swr .legend{display:flex;gap:14px;font-size:12px;color:var(--muted);margin:0 0 6px;flex-wrap:wrap}
.swr .legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.swr svg{display:block;width:100%;height:auto;font:11.5px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
.swr svg .lbl{fill:var(--fg)}
.swr svg .val,.swr svg .tick{fill:var(--muted)}
.swr svg .grid{stroke:#eef0f3}
.swr svg .lane{fill:#f8f9fb}
.swr .seg-trace{fill:#5b8def}.swr .seg-lower{fill:#f5a524}.swr .seg-compile{fill:#e5484d}
.swr .mark{fill:#e5484d;fill-opacity:.85;stroke:#fff;stroke-width:.6;cursor:pointer}
.swr .mark.kind-inlined,.swr .mark.kind-ahead_of_time,.swr .mark.kind-unknown{fill:#98a2b3}
.swr .mark.kind-persistent_cache_hit{fill:#12a594}
.swr .mark.kind-transform,.swr .mark.kind-no_retrace{fill:#8e4ec6}
.swr .mark:hover,.swr .fn-row:hover rect,.swr .hbar:hover{fill-opacity:1;stroke:#1f2430;stroke-width:1}
.swr .hbar{fill:#5b8def;fill-opacity:.85}
.swr .band{fill:#f7f8fa}.swr .band.odd{fill:#e8eef9}
.swr .boundary{stroke:#e5484d;stroke-width:1.5;stroke-dasharray:4 3}
.swr .blabel{fill:#e5484d;font-weight:600}
.swr .causes{display:grid;gap:12px}
.swr .cause{border:1px solid var(--line);border-radius:8px;padding:10px 12px;display:flex;flex-wrap:wrap;gap:6px 22px}
.swr .ctext{flex:1 1 320px}.swr .cpic{flex:0 1 480px}
.swr .cause p{margin:0 0 6px}
.swr .fix{background:#fff5f5;border-left:3px solid var(--accent);padding:6px 9px;border-radius:4px;margin-top:6px}
.swr .chip{display:inline-block;background:#f2f4f7;border-radius:10px;padding:1px 8px;margin:2px 4px 2px 0;font-size:12px}
.swr code,.swr .mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.swr .tablewrap{max-height:520px;overflow:auto;border:1px solid var(--line);border-radius:8px}
.swr table{border-collapse:collapse;width:100%;font-size:13px}
.swr th,.swr td{padding:5px 9px;border-bottom:1px solid var(--line);vertical-align:top;text-align:left}
.swr td.num,.swr th.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.swr thead th{position:sticky;top:0;background:#f9fafb;font-weight:600;white-space:nowrap}
.swr table.sortable th{cursor:pointer;user-select:none}
.swr table.sortable th::after{content:" \\2195";color:#c0c5cf}
.swr table.sortable th[aria-sort=ascending]::after{content:" \\2191";color:var(--fg)}
.swr table.sortable th[aria-sort=descending]::after{content:" \\2193";color:var(--fg)}
.swr .differs{background:#fff1f0;color:#b42318;font-weight:600;padding:0 5px;border-radius:4px}
.swr .kind{font-size:11.5px;border-radius:8px;padding:0 6px;background:#fdecec;color:#b42318}
.swr .kind.k-inlined,.swr .kind.k-ahead_of_time,.swr .kind.k-unknown{background:#f2f4f7;color:#475467}
.swr .sw-tip{position:fixed;z-index:1000;max-width:460px;background:#1f2430;color:#fff;border-radius:6px;
 padding:7px 10px;font-size:12.5px;line-height:1.4;pointer-events:none;box-shadow:0 4px 14px rgba(0,0,0,.25)}
.swr .sw-tip div{white-space:pre-wrap;word-break:break-word}
.swr .sw-tip .sw-tip-h{font-weight:650;margin-bottom:2px}
.swr .sw-tip[hidden]{display:none}
.swr dl.env{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;margin:0;font-size:13px}
.swr dl.env dt{color:var(--muted)}.swr dl.env dd{margin:0}
"""

# Hover: every element with an SVG <title> gets the shared tooltip (the <title> is the
# fallback where scripts do not run, e.g. a notebook viewed on a site). Tables sort on a click.
JS = """
(function(){
var root=document.getElementById(%(id)s);if(!root)return;
var tip=root.querySelector('.sw-tip');
root.querySelectorAll('[data-hover]').forEach(function(el){
 var t=el.querySelector('title');if(t){el.setAttribute('data-tip',t.textContent);t.remove();}});
function place(ev){var w=tip.offsetWidth,h=tip.offsetHeight,x=ev.clientX+14,y=ev.clientY+14;
 if(x+w>window.innerWidth-4)x=Math.max(4,ev.clientX-w-14);
 if(y+h>window.innerHeight-4)y=Math.max(4,ev.clientY-h-14);tip.style.left=x+'px';tip.style.top=y+'px';}
root.addEventListener('mouseover',function(ev){var el=ev.target.closest&&ev.target.closest('[data-tip]');
 if(!el||!root.contains(el)){tip.hidden=true;return;}tip.textContent='';
 el.getAttribute('data-tip').split('\\n').forEach(function(line,i){var d=document.createElement('div');
  d.textContent=line;if(i===0)d.className='sw-tip-h';tip.appendChild(d);});tip.hidden=false;place(ev);});
root.addEventListener('mousemove',function(ev){if(!tip.hidden)place(ev);});
root.addEventListener('mouseleave',function(){tip.hidden=true;});
function key(td){var v=td.getAttribute('data-v');return v!==null?parseFloat(v):td.textContent.toLowerCase();}
root.querySelectorAll('table.sortable').forEach(function(table){
 var ths=table.tHead.rows[0].cells;
 Array.prototype.forEach.call(ths,function(th,i){th.tabIndex=0;
  function sort(){var asc=th.getAttribute('aria-sort')!=='ascending';
   Array.prototype.forEach.call(ths,function(h){h.removeAttribute('aria-sort');});
   th.setAttribute('aria-sort',asc?'ascending':'descending');
   var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
   rows.sort(function(a,b){var x=key(a.cells[i]),y=key(b.cells[i]);return (x<y?-1:x>y?1:0)*(asc?1:-1);});
   rows.forEach(function(r){body.appendChild(r);});}
  th.addEventListener('click',sort);
  th.addEventListener('keydown',function(ev){if(ev.key==='Enter'||ev.key===' '){ev.preventDefault();sort();}});});});
})();
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src '%(script_hash)s'; img-src data:">
<meta name="generator" content="shapewatch">
<title>%(title)s</title>
<style>html,body{margin:0;background:#f6f7f9}body{padding:16px}.swr{max-width:1180px;margin:0 auto}</style>
</head>
<body>
%(body)s
</body>
</html>
"""


def script(root_id: str) -> str:
    """The page's script, bound to the fragment whose id is ``root_id``."""
    return JS % {"id": '"' + root_id + '"'}


def script_hash(code: str) -> str:
    """The CSP source that allows exactly this inline script (and no injected one)."""
    return "sha256-" + base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()


def page(title: str, body: str, code: str) -> str:
    """A whole document around a fragment; ``title`` must already be escaped."""
    return PAGE % {"title": title, "body": body, "script_hash": script_hash(code)}
