/**
 * The console's only static files, served from the package (no CDN, nothing fetched at run time):
 * a small stylesheet and the script that refreshes the overview without reloading the page.
 */

/** Stylesheet: plain, readable, dense tables. */
export const CONSOLE_CSS = `
:root { color-scheme: light; --fg: #1d232a; --muted: #5b6672; --line: #d8dee4; --bg: #f6f8fa; --accent: #0b5cad; --bad: #b42318; --warn: #9a6700; --ok: #1a7f37; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: #fff; }
header { display: flex; align-items: center; gap: 24px; padding: 10px 20px; background: var(--fg); color: #fff; }
header strong { font-size: 16px; }
header nav a { color: #d0d7de; margin-right: 16px; text-decoration: none; }
header nav a.here { color: #fff; font-weight: 600; border-bottom: 2px solid #fff; }
header .mode { margin-left: auto; font-size: 12px; padding: 2px 8px; border-radius: 10px; background: #3d4651; }
header .mode.actions { background: var(--bad); }
main { padding: 16px 20px 40px; max-width: 1400px; }
h1 { font-size: 20px; margin: 4px 0 12px; }
h2 { font-size: 16px; margin: 22px 0 8px; }
p.note, .muted { color: var(--muted); }
table { border-collapse: collapse; width: 100%; margin: 6px 0 12px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--bg); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre, .id { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
pre { background: var(--bg); border: 1px solid var(--line); padding: 8px; margin: 4px 0; white-space: pre-wrap; word-break: break-word; max-height: 320px; overflow: auto; }
a { color: var(--accent); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); gap: 16px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; }
.reason { font-weight: 600; }
.cause-expired-lease, .cause-poison, .state-dead { color: var(--bad); }
.cause-retry-backoff, .cause-scheduled, .state-processing { color: var(--warn); }
.state-sent, .state-processed { color: var(--ok); }
form.filters { display: flex; flex-wrap: wrap; gap: 10px; align-items: end; margin: 8px 0 14px; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
input, select, textarea { font: inherit; padding: 4px 6px; border: 1px solid var(--line); border-radius: 4px; }
button { font: inherit; padding: 5px 12px; border-radius: 4px; border: 1px solid var(--accent); background: var(--accent); color: #fff; cursor: pointer; }
button.danger { background: var(--bad); border-color: var(--bad); }
.banner { padding: 8px 12px; border-radius: 6px; margin: 8px 0 14px; background: var(--bg); border: 1px solid var(--line); }
.banner.error { border-color: var(--bad); color: var(--bad); }
.banner.done { border-color: var(--ok); color: var(--ok); }
dl.fields { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; }
dl.fields dt { color: var(--muted); }
dl.fields dd { margin: 0; }
ol.history li { margin: 3px 0; }
#live { font-size: 12px; color: var(--muted); }
`;

/**
 * Refreshes the element marked `data-live` from its URL every five seconds (the server
 * renders the fragment: the page's markup stays escaped server-side; nothing is built from data here).
 */
export const CONSOLE_JS = `
(() => {
  const target = document.querySelector('[data-live]');
  if (!target) return;
  const status = document.getElementById('live');
  const url = target.getAttribute('data-live');
  const tick = async () => {
    try {
      const response = await fetch(url, { headers: { accept: 'text/html' }, cache: 'no-store' });
      if (!response.ok) throw new Error('HTTP ' + response.status);
      target.innerHTML = await response.text();
      if (status) status.textContent = 'live · updated ' + new Date().toLocaleTimeString();
    } catch (error) {
      if (status) status.textContent = 'live · refresh failed (' + error.message + '), retrying';
    }
  };
  setInterval(tick, 5000);
})();
`;
