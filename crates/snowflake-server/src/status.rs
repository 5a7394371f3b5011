//! The status page (`GET /` on the HTTP and admin listeners): one self-contained HTML page, no
//! external assets and no build step. Rendered on the server, so that without JavaScript it
//! still shows the identity, readiness and why not, the lease, the clock against the
//! high-water mark and the fleet's held pairs, and decodes an ID through a plain form
//! (`GET /?decode=ID`). With JavaScript (`/status.js`, same origin) it refreshes itself from
//! `GET /v1/status` every second, shows the node's live IDs/s, and decodes as you type.
//!
//! Everything shown that the node did not write itself (host names and addresses read from
//! etcd or ZooKeeper, a pasted ID) is escaped; the page's policy allows no other origin.

use crate::node::Node;
use snowflake_core::format_unix_ms;
use snowflake_fleet::FleetRead;
use std::fmt::Write as _;

/// The page's Content-Security-Policy: its own script and styles, requests to itself only.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; \
                       connect-src 'self'; img-src 'self' data:; form-action 'self'; \
                       base-uri 'none'; frame-ancestors 'none'";

/// What `GET /v1/status` answers: what the page shows, as JSON.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    /// `/v1/info`'s fields (with the layout, from which the page decodes IDs by itself).
    #[serde(flatten)]
    pub info: crate::node::Info,
    /// Why the node cannot issue IDs right now, in words (absent while ready).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
    /// The timestamp (Unix ms) of the last issued ID (or of the mark resumed from).
    pub last_issued_ms: u64,
    /// IDs issued since the process started, over every protocol.
    pub ids_issued: u64,
    /// The held pairs of the node's datacenter, as last read (in a fleet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetRead>,
}

/// The node's status now.
pub fn status(node: &Node) -> Status {
    let not_ready = node.readiness().err().map(|e| e.to_string());
    let mut info = node.info();
    // One answer for both fields (they are read under two locks).
    info.ready = not_ready.is_none();
    Status {
        info,
        not_ready,
        last_issued_ms: node.last_issued_ms(),
        ids_issued: node.metrics().ids_issued_total(),
        fleet: node.coordinator().and_then(|_| node.fleet().get()),
    }
}

/// HTML-escapes `text` (also quotes, for attribute values).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// How far `ms` is from `now_ms`, in words ("2.0 s ahead").
fn relative(ms: u64, now_ms: u64) -> String {
    let (diff, word) = if ms >= now_ms {
        (ms - now_ms, "ahead of")
    } else {
        (now_ms - ms, "behind")
    };
    format!("{:.1} s {word} the clock", diff as f64 / 1000.0)
}

/// The result of the no-JavaScript decode form, as HTML.
fn decoded_html(node: &Node, text: &str) -> String {
    let layout = node.layout();
    match layout
        .parse_id(text.trim())
        .and_then(|id| layout.describe(id))
    {
        Ok(d) => {
            format!(
                "<dl id=\"decode-result\" class=\"fields\"><dt>id</dt><dd data-field=\"id\">{}</dd>\
                 <dt>time</dt><dd data-field=\"time\">{}</dd>\
                 <dt>timestamp_ms</dt><dd data-field=\"timestamp_ms\">{}</dd>\
                 <dt>datacenter_id</dt><dd data-field=\"datacenter_id\">{}</dd>\
                 <dt>worker_id</dt><dd data-field=\"worker_id\">{}</dd>\
                 <dt>sequence</dt><dd data-field=\"sequence\">{}</dd></dl>",
                d.id.as_u64(),
                escape(&d.time),
                d.timestamp_ms,
                d.datacenter_id,
                d.worker_id,
                d.sequence
            )
        }
        Err(err) => format!(
            "<p id=\"decode-result\" class=\"bad\">{}</p>",
            escape(&err.to_string())
        ),
    }
}

/// The page, with the decode form's result when `decode` is given.
pub fn page(node: &Node, decode: Option<&str>) -> String {
    let s = status(node);
    let info = &s.info;
    let mut html = String::with_capacity(8192);
    let title = format!(
        "snowflake {}/{}: {}",
        info.datacenter_id,
        info.worker_id,
        if s.not_ready.is_none() {
            "ready"
        } else {
            "NOT READY"
        }
    );
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>{STYLE}</style></head><body>\
         <h1>snowflake <span id=\"identity\">datacenter {dc} · worker {w}</span></h1>\
         <p class=\"sub\">identity from <b id=\"identity-source\">{source}</b> · version {version} · \
         layout <b id=\"layout\">{layout}</b> · epoch {epoch} ({epoch_time})</p>",
        title = escape(&title),
        dc = info.datacenter_id,
        w = info.worker_id,
        source = escape(info.identity_source),
        version = escape(info.version),
        layout = escape(&info.layout.name),
        epoch = info.epoch_ms,
        epoch_time = format_unix_ms(info.epoch_ms),
    );
    match &s.not_ready {
        None => html.push_str(
            "<p id=\"ready\" class=\"ok\">Ready: issuing IDs.</p><p id=\"reason\" hidden></p>",
        ),
        Some(reason) => {
            let _ = write!(
                html,
                "<p id=\"ready\" class=\"bad\">Not ready: not issuing IDs.</p>\
                 <p id=\"reason\" class=\"bad\">{}</p>",
                escape(reason)
            );
        }
    }
    let _ = write!(
        html,
        "<section><h2>Clock and high-water mark</h2><dl class=\"fields\">\
         <dt>clock</dt><dd id=\"clock\">{now}</dd>\
         <dt>high-water mark</dt><dd id=\"mark\">{mark} ({mark_rel})</dd>\
         <dt>last issued</dt><dd id=\"last\">{last} ({last_rel})</dd>\
         <dt>IDs issued</dt><dd id=\"issued\">{issued}</dd>\
         <dt>IDs/s</dt><dd id=\"rate\">…</dd></dl></section>",
        now = format_unix_ms(info.timestamp_ms),
        mark = format_unix_ms(info.high_water_mark_ms),
        mark_rel = relative(info.high_water_mark_ms, info.timestamp_ms),
        last = if s.last_issued_ms == 0 {
            "none yet".to_owned()
        } else {
            format_unix_ms(s.last_issued_ms)
        },
        last_rel = if s.last_issued_ms == 0 {
            "since the start".to_owned()
        } else {
            relative(s.last_issued_ms, info.timestamp_ms)
        },
        issued = s.ids_issued,
    );
    html.push_str("<section><h2>Lease</h2>");
    match &info.lease {
        None => html.push_str(
            "<p id=\"lease\">No lease: the pair is configured on this node, not leased.</p>",
        ),
        Some(lease) => {
            let _ = write!(
                html,
                "<dl class=\"fields\" id=\"lease\"><dt>state</dt><dd id=\"lease-state\">{state}</dd>\
                 <dt>key</dt><dd>{key}</dd><dt>lease/session</dt><dd>{id}</dd>\
                 <dt>time left</dt><dd id=\"lease-left\">{left:.1} s of {ttl} s</dd>\
                 <dt>renewals</dt><dd>{renewals} ({failures} failed, {losses} lost)</dd>{reason}</dl>",
                state = escape(lease.state),
                key = escape(&lease.key),
                id = escape(lease.lease_id.as_deref().unwrap_or("-")),
                left = lease.remaining_ms as f64 / 1000.0,
                ttl = lease.ttl_secs,
                renewals = lease.renewals,
                failures = lease.renewal_failures,
                losses = lease.losses,
                reason = lease.reason.as_deref().map_or(String::new(), |r| format!(
                    "<dt>why</dt><dd class=\"bad\">{}</dd>",
                    escape(r)
                )),
            );
        }
    }
    html.push_str("</section>");
    if let Some(fleet) = &s.fleet {
        fleet_html(&mut html, fleet, info.worker_id);
    }
    let value = decode.map(escape).unwrap_or_default();
    let _ = writeln!(
        html,
        "<section><h2>Decode an ID</h2><form id=\"decode-form\" method=\"get\" action=\"/\">\
         <input id=\"decode-input\" name=\"decode\" value=\"{value}\" inputmode=\"numeric\" \
         placeholder=\"1724551110457221119\" size=\"24\" autocomplete=\"off\">\
         <button type=\"submit\">Decode</button></form>{result}</section>\
         <p class=\"sub\">JSON: <a href=\"/v1/status\">/v1/status</a> · probes: /healthz, /readyz · \
         metrics: /metrics</p><script src=\"/status.js\"></script></body></html>",
        result = decode.map_or_else(
            || "<div id=\"decode-result\"></div>".to_owned(),
            |d| decoded_html(node, d)
        ),
    );
    html
}

/// The fleet's table of held pairs.
fn fleet_html(html: &mut String, fleet: &FleetRead, own_worker: u64) {
    if fleet.read_at_ms == 0 {
        let _ = write!(
            html,
            "<section><h2>Fleet: datacenter {}</h2><p id=\"fleet-summary\">Not read yet.</p>",
            fleet.datacenter_id
        );
    } else {
        let _ = write!(
            html,
            "<section><h2>Fleet: datacenter {dc}</h2><p id=\"fleet-summary\">{held} of {workers} \
             worker ids held, {free} free (read {read}).</p>",
            dc = fleet.datacenter_id,
            held = fleet.held.len(),
            workers = fleet.workers,
            free = fleet
                .workers
                .saturating_sub(u64::try_from(fleet.held.len()).unwrap_or(u64::MAX)),
            read = format_unix_ms(fleet.read_at_ms),
        );
    }
    if let Some(error) = &fleet.error {
        let _ = write!(
            html,
            "<p class=\"bad\">The last read failed: {}</p>",
            escape(error)
        );
    }
    html.push_str(
        "<table id=\"fleet\"><thead><tr><th>worker</th><th>holder</th><th>address</th>\
         <th>since</th></tr></thead><tbody>",
    );
    for pair in &fleet.held {
        let _ = write!(
            html,
            "<tr{mine}><td>{w}</td><td>{holder}</td><td>{address}</td><td>{since}</td></tr>",
            mine = if pair.worker_id == own_worker {
                " class=\"mine\""
            } else {
                ""
            },
            w = pair.worker_id,
            holder = escape(&pair.holder),
            address = escape(&pair.address),
            since = escape(&pair.since),
        );
    }
    html.push_str("</tbody></table></section>");
}

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;max-width:60em;margin:1.5em auto;\
padding:0 1em;color:#1d1d1f}h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.1em;margin:1.2em 0 .4em}\
.sub{color:#666;font-size:.9em}.ok{color:#0a6b2d;font-weight:600}.bad{color:#b00020;font-weight:600}\
dl.fields{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;margin:0}\
dt{color:#666}dd{margin:0;font-variant-numeric:tabular-nums}table{border-collapse:collapse}\
td,th{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:left}tr.mine{background:#eef6ff}\
input{font:inherit;padding:.2em .4em}button{font:inherit}";

/// `/status.js`: refreshes the page from `/v1/status` and decodes IDs in the browser (BigInt,
/// the layout's widths from the status), the same fields as `/v1/decode`.
pub const SCRIPT: &str = r#""use strict";
(function () {
  var layout = null, last = null;
  function iso(ms) { return new Date(Number(ms)).toISOString(); }
  function rel(ms, now) {
    var d = (ms - now) / 1000;
    return Math.abs(d).toFixed(1) + " s " + (d >= 0 ? "ahead of" : "behind") + " the clock";
  }
  function text(id, value) { var e = document.getElementById(id); if (e) e.textContent = value; }
  function refresh() {
    fetch("/v1/status", { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (s) {
      layout = s;
      text("identity", "datacenter " + s.datacenter_id + " \u00b7 worker " + s.worker_id);
      text("identity-source", s.identity_source);
      var ready = document.getElementById("ready"), reason = document.getElementById("reason");
      ready.className = s.not_ready ? "bad" : "ok";
      ready.textContent = s.not_ready ? "Not ready: not issuing IDs." : "Ready: issuing IDs.";
      reason.hidden = !s.not_ready;
      reason.className = "bad";
      reason.textContent = s.not_ready || "";
      document.title = "snowflake " + s.datacenter_id + "/" + s.worker_id + ": " + (s.not_ready ? "NOT READY" : "ready");
      text("clock", iso(s.timestamp_ms));
      text("mark", iso(s.high_water_mark_ms) + " (" + rel(s.high_water_mark_ms, s.timestamp_ms) + ")");
      text("last", s.last_issued_ms ? iso(s.last_issued_ms) + " (" + rel(s.last_issued_ms, s.timestamp_ms) + ")" : "none yet (since the start)");
      text("issued", String(s.ids_issued));
      var now = performance.now();
      if (last) {
        var secs = (now - last.at) / 1000;
        if (secs > 0) text("rate", Math.round((s.ids_issued - last.ids) / secs).toLocaleString("en-US"));
      }
      last = { at: now, ids: s.ids_issued };
      if (s.lease) {
        text("lease-state", s.lease.state);
        text("lease-left", (s.lease.remaining_ms / 1000).toFixed(1) + " s of " + s.lease.ttl_secs + " s");
      }
    }).catch(function () { text("rate", "(no answer)"); });
  }
  // Decodes a valid ID in the browser (BigInt, the layout's widths from /v1/status) and says
  // whether it did. Anything else (not a number, out of range, a date past year 9999) is left
  // to the server's form, so that its messages and formats are the service's own.
  function decode(value) {
    var out = document.getElementById("decode-result");
    if (!layout || !out) return false;
    value = value.trim();
    if (!/^[0-9]{1,19}$/.test(value)) return false;
    var id = BigInt(value);
    if (id >= (1n << 63n)) return false;
    var b = layout.layout;
    // Above the layout's largest ID: the server's form says why.
    if (id > BigInt(b.max_id)) return false;
    var seqBits = BigInt(b.sequence_bits), wBits = BigInt(b.worker_bits), dcBits = BigInt(b.datacenter_bits);
    var sequence = id & ((1n << seqBits) - 1n);
    var worker = (id >> seqBits) & ((1n << wBits) - 1n);
    var dc = (id >> (seqBits + wBits)) & ((1n << dcBits) - 1n);
    var ts = (id >> (seqBits + wBits + dcBits)) + BigInt(b.epoch_ms);
    if (ts > 253402300799999n) return false;
    var dl = document.createElement("dl"); dl.id = "decode-result"; dl.className = "fields";
    [["id", id.toString()], ["time", iso(ts)], ["timestamp_ms", ts.toString()], ["datacenter_id", dc.toString()],
     ["worker_id", worker.toString()], ["sequence", sequence.toString()]].forEach(function (f) {
      var dt = document.createElement("dt"); dt.textContent = f[0];
      var dd = document.createElement("dd"); dd.textContent = f[1]; dd.setAttribute("data-field", f[0]);
      dl.appendChild(dt); dl.appendChild(dd);
    });
    out.replaceWith(dl);
    return true;
  }
  var form = document.getElementById("decode-form"), input = document.getElementById("decode-input");
  // Submitted: decoded here when it can be, else the form goes to the server as without script.
  form.addEventListener("submit", function (e) { if (decode(input.value)) e.preventDefault(); });
  input.addEventListener("input", function () { decode(input.value); });
  refresh();
  setInterval(refresh, 1000);
})();
"#;

#[cfg(test)]
mod tests {
    use super::{escape, relative};

    #[test]
    fn escaping_covers_markup_quotes_and_control_characters() {
        assert_eq!(
            escape("<script>\"a\"&'b'\n"),
            "&lt;script&gt;&quot;a&quot;&amp;&#39;b&#39; "
        );
    }

    #[test]
    fn relative_times_say_ahead_or_behind() {
        assert_eq!(relative(3_000, 1_000), "2.0 s ahead of the clock");
        assert_eq!(relative(1_000, 1_500), "0.5 s behind the clock");
    }
}
