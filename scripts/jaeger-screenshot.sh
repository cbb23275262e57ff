#!/usr/bin/env bash
# The picture in docs/operations.md ("Reading a trace in Jaeger"): one
# order of `tokenbox demo` followed through both hops in Jaeger's UI,
# taken with headless Chromium.
#
# Starts a Jaeger of its own (scripts/jaeger.sh, with the UI), runs the
# demo with tracing on, asks Jaeger's query API for an order whose trace
# holds the publisher's span, both hops' process spans and a dropped
# duplicate's span, and screenshots the UI's page of that trace.  Run with
# --help.
set -euo pipefail
cd "$(dirname "$0")/.."

prog=scripts/jaeger-screenshot.sh
# The jaeger-ui release of the Jaeger that scripts/jaeger.sh builds.
ui_version=${TBX_JAEGER_VERSION:-1.76.0}
usage() {
	cat <<EOF
usage: $prog --ui DIR [--build DIR] [--out FILE] [--port-base P]
                            [--messages N] [--seed S] [--install-chromium]

Takes docs/img/jaeger-trace.png: Jaeger's page of one order's trace
through both hops of \`tokenbox demo\` (publisher -> order-service ->
payment-service), with a duplicate copy's span and why it was dropped.

  --ui DIR             a built jaeger-ui, the directory with its index.html
                       (default TBX_JAEGER_UI).  Jaeger built from the Go
                       module proxy has no UI; in a checkout of jaeger-ui
                       v$ui_version (its repository; no registry has it):
                         npm ci --ignore-scripts --engine-strict=false
                         (cd packages/plexus && npm run build)
                         cd packages/jaeger-ui
                         NODE_ENV=production REACT_APP_VSN_STATE='{}' npx vite build
                       and give packages/jaeger-ui/build
  --build DIR          the build whose tokenbox runs the demo (default build)
  --out FILE           the PNG (default docs/img/jaeger-trace.png)
  --port-base P        Jaeger's ports P..P+2 (default TBX_JAEGER_PORT_BASE,
                       else 29850)
  --messages N         orders the demo publishes (default 40)
  --seed S             the demo's seed (default 7)
  --install-chromium   install Debian's chromium with apt-get if missing
                       (else a missing chromium is an error: CI never
                       needs it, so scripts/install-deps.sh leaves it out)

Needs chromium, curl, python3 and Jaeger (built by scripts/jaeger.sh).
EOF
}

die() {
	echo "$prog: $*" >&2
	exit 1
}

ui=${TBX_JAEGER_UI:-}
build=build
out=docs/img/jaeger-trace.png
port_base=${TBX_JAEGER_PORT_BASE:-29850}
messages=40
seed=7
install=0
while (($#)); do
	case $1 in
	--ui) ui=${2:-} && shift 2 ;;
	--build) build=${2:-} && shift 2 ;;
	--out) out=${2:-} && shift 2 ;;
	--port-base) port_base=${2:-} && shift 2 ;;
	--messages) messages=${2:-} && shift 2 ;;
	--seed) seed=${2:-} && shift 2 ;;
	--install-chromium) install=1 && shift ;;
	-h | --help)
		usage
		exit 0
		;;
	*) die "unknown option '$1' (see --help)" ;;
	esac
done
[[ -n $ui ]] || die "--ui: give a built jaeger-ui (see --help)"
[[ -f $ui/index.html ]] || die "--ui: $ui has no index.html (see --help)"
[[ -x $build/tokenbox ]] || die "$build/tokenbox is not built (scripts/build.sh --dir $build)"
[[ $messages =~ ^[0-9]+$ ]] && ((messages >= 10 && messages <= 10000)) ||
	die "--messages: want 10 to 10000, got '$messages'"
[[ $seed =~ ^[0-9]+$ ]] || die "--seed: want a whole number, got '$seed'"
[[ -n $out ]] || die "--out: empty"
for c in curl python3; do
	command -v $c >/dev/null 2>&1 || die "$c not found (Debian: apt-get install $c)"
done
if ! command -v chromium >/dev/null 2>&1; then
	((install)) || die "chromium not found: apt-get install chromium" \
		"(Debian), or run with --install-chromium"
	apt-get install -y chromium >&2 || die "apt-get install chromium failed"
fi

dir=$(mktemp -d /tmp/tokenbox-screenshot.XXXXXX)
finish() {
	bash scripts/jaeger.sh stop --dir "$dir/jaeger" >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap finish EXIT

endpoint=$(bash scripts/jaeger.sh start --dir "$dir/jaeger" \
	--port-base "$port_base" --ui "$ui")
query=$(cat "$dir/jaeger/query")

echo "$prog: tokenbox demo --messages $messages --seed $seed, traced to $endpoint" >&2
OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint OTEL_BSP_SCHEDULE_DELAY=100 \
	"$build/tokenbox" demo --messages "$messages" --seed "$seed" --json \
	>"$dir/demo.json" 2>"$dir/demo.log" ||
	die "the demo failed: $(tail -n 5 "$dir/demo.log")"

# An order whose trace is whole -- the publisher's send span, order-
# service's process span and its send span, payment-service's process
# span, parent to child -- with a duplicate's process span that says why it
# was dropped.  Jaeger stores what it receives a moment later: asked again
# until one is there.
pick() {
	curl -fsS -m 10 "$query/api/traces?service=publisher&limit=100000" |
		python3 -c '
import json, sys

def tags(kv):
    return {t["key"]: t["value"] for t in kv}

for t in json.load(sys.stdin)["data"]:
    svc = lambda s: t["processes"][s["processID"]]["serviceName"]
    par = lambda s: s["references"][0]["spanID"] if s["references"] else ""
    def find(service, op, parent, event):
        for s in t["spans"]:
            evs = [tags(l["fields"]) for l in s["logs"]]
            if (svc(s) == service and s["operationName"] == op
                    and par(s) == parent
                    and (event is None
                         or any(e.get("event") == event for e in evs))):
                return s
    pub = find("publisher", "send orders", "", None)
    if not pub:
        continue
    proc = find("order-service", "process orders", pub["spanID"], "processed")
    send = proc and find("order-service", "send payments", proc["spanID"], None)
    pay = send and find("payment-service", "process payments", send["spanID"], "processed")
    dup = find("order-service", "process orders", pub["spanID"], "duplicate dropped")
    if pay and dup:
        print(t["traceID"], dup["spanID"])
        break
'
}
found=
for _ in $(seq 1 100); do
	found=$(pick 2>/dev/null || true)
	[[ -n $found ]] && break
	sleep 0.3
done
[[ -n $found ]] || die "Jaeger ($query) holds no whole trace with a dropped" \
	"duplicate at order-service (try another --seed or more --messages)"

read -r trace dup <<<"$found"
mkdir -p "$(dirname "$out")"
# uiFind marks the duplicate's row; its details are opened, with its logs.
url="$query/trace/$trace?uiFind=$dup"
echo "$prog: $url -> $out" >&2
# The UI is a single-page application, and the details open on a click:
# headless Chromium is driven over the DevTools protocol on a pipe
# (--remote-debugging-pipe: requests on fd 3, answers on fd 4, each a
# JSON object ended by a NUL byte) -- open the page, wait until the
# spans are drawn, click, take the picture.
if ! python3 - "$url" "$out" "$dir/chromium" >"$dir/chromium.log" 2>&1 <<'EOF'; then
import base64, json, os, subprocess, sys, time

url, out, profile = sys.argv[1:4]
to_r, to_w = os.pipe()
from_r, from_w = os.pipe()


def fds():
    os.dup2(to_r, 3)
    os.dup2(from_w, 4)
    os.set_inheritable(3, True)
    os.set_inheritable(4, True)


chrome = subprocess.Popen(
    ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
     "--hide-scrollbars", "--remote-debugging-pipe",
     "--user-data-dir=" + profile, "--window-size=1600,760", "about:blank"],
    preexec_fn=fds, close_fds=False, stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.close(to_r)
os.close(from_w)
wr = os.fdopen(to_w, "wb", buffering=0)
rd = os.fdopen(from_r, "rb", buffering=0)
pending = b""
last = 0


def call(method, params=None, session=None):
    global pending, last
    last += 1
    msg = {"id": last, "method": method, "params": params or {}}
    if session:
        msg["sessionId"] = session
    wr.write(json.dumps(msg).encode() + b"\0")
    while True:
        while b"\0" not in pending:
            chunk = rd.read(65536)
            if not chunk:
                sys.exit("chromium closed the DevTools pipe")
            pending += chunk
        raw, pending = pending.split(b"\0", 1)
        m = json.loads(raw)
        if m.get("id") == last:
            if "error" in m:
                sys.exit("%s: %s" % (method, m["error"]))
            return m["result"]


def js(session, expr):
    r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                  "awaitPromise": True}, session)
    return r.get("result", {}).get("value")


try:
    target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
    s = call("Target.attachToTarget",
             {"targetId": target, "flatten": True})["sessionId"]
    call("Emulation.setDeviceMetricsOverride",
         {"width": 1600, "height": 760, "deviceScaleFactor": 1,
          "mobile": False}, s)
    call("Page.navigate", {"url": url}, s)
    deadline = time.time() + 60
    while not js(s, "!!document.querySelector("
                 "'.span-name-wrapper.is-matching-filter .span-name')"):
        if time.time() > deadline:
            sys.exit("the trace page drew no span marked by uiFind")
        time.sleep(0.3)
    done = js(s, """(async () => {
      const sleep = ms => new Promise(r => setTimeout(r, ms));
      /* uiFind folds what does not match: "Expand All" unfolds the
         whole trace again. */
      const all = document.querySelectorAll('.TimelineCollapser svg')[2];
      if (!all) return 'no Expand All button';
      all.dispatchEvent(new MouseEvent('click', {bubbles: true}));
      await sleep(500);
      const name = document.querySelector(
        '.span-name-wrapper.is-matching-filter .span-name');
      await sleep(500);
      if (!name.classList.contains('is-detail-expanded')) {
        name.click();
        await sleep(500);
      }
      /* An event at the very end of the trace is "out of range" once
         Jaeger has cut the times to microseconds: show them all. */
      const range = document.querySelector(
        '.AccordianLogs--header .AccordianLogs--toggle');
      if (range && /show all/.test(range.textContent)) {
        range.click();
        await sleep(300);
      }
      const logs = document.querySelector('.AccordianLogs--header');
      if (!logs) return 'the span has no logs';
      if (!logs.classList.contains('is-open')) logs.click();
      await sleep(300);
      const heads = document.querySelectorAll(
        '.AccordianLogs--content .AccordianKeyValues--header');
      heads.forEach(h => h.click());
      await sleep(500);
      return heads.length ? 'ok' : 'no log entry drawn';
    })()""")
    if done != "ok":
        sys.exit("opening the span's details: %s" % done)
    shot = call("Page.captureScreenshot", {"format": "png"}, s)
    with open(out, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
finally:
    chrome.kill()
    chrome.wait()
EOF
	die "the screenshot failed: $(tail -n 5 "$dir/chromium.log")"
fi
[[ -s $out ]] || die "no picture was written"
echo "$trace"
