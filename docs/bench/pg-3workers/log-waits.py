#!/usr/bin/env python3
"""The lock waits of a tbx_bench --pg-workers run in the server's log.

The server ran with log_lock_waits = on and deadlock_timeout = 1ms, and
log_line_prefix = '%m [%p] %a ', so that every wait longer than 1 ms is a
"still waiting" line naming the run's backend (application_name
tbx_bench-<pid>-<n>), followed by its DETAIL, CONTEXT and STATEMENT.
Usage: log-waits.py SERVER_LOG BENCH_JSON
Prints, per configuration (layout, workers), the waits by lock and table.
"""
import collections
import json
import re
import sys

log, bench = sys.argv[1], sys.argv[2]
runs = json.load(open(bench))["tokenbox_pg_workers"]["runs"]
conf = {r["application_name"]: "%s/%s, %d worker(s)" % (
    r["layout"], r["tokens_format"], r["workers"]) for r in runs}
line_re = re.compile(r"^\S+ \S+ UTC \[(\d+)\] (\S*) (LOG|DETAIL|CONTEXT|"
                     r"STATEMENT):\s+(.*)$")
waits = []          # [config, lock, context, statement]
open_wait = {}      # pid -> the wait its next lines describe
for line in open(log, errors="replace"):
    m = line_re.match(line.rstrip("\n"))
    if not m:
        continue
    pid, app, kind, text = m.groups()
    if kind == "LOG":
        open_wait.pop(pid, None)
        w = re.match(r"process \d+ still waiting for (\S+) on (.*) after", text)
        if w and app in conf:
            lock = w.group(2)
            lock = re.sub(r"advisory lock \[\d+,(\d+),\d+,\d+\]",
                          r"advisory lock \1", lock)
            lock = re.sub(r"extension of relation \d+ of database \d+",
                          "extension of relation", lock)
            lock = re.sub(r"transaction \d+", "transaction (a row lock)", lock)
            lock = re.sub(r"tuple \(\d+,\d+\) of relation \d+ of database \d+",
                          "tuple", lock)
            rec = [conf[app], w.group(1) + " on " + lock, "", ""]
            waits.append(rec)
            open_wait[pid] = rec
    elif pid in open_wait:
        rec = open_wait[pid]
        if kind == "CONTEXT":
            rec[2] = re.sub(r"\(\d+,\d+\)", "", text)
        elif kind == "STATEMENT":
            t = re.search(r"(?:INTO|UPDATE|FROM)\s+\"?[a-z0-9_]*\"?\.?(\w+)",
                          text)
            rec[3] = text[:40] + "..." if not t else text.split()[0] + " " + t.group(1)
            open_wait.pop(pid, None)
by = collections.Counter((w[0], w[1], w[2] or w[3]) for w in waits)
for c in sorted(set(w[0] for w in waits)):
    total = sum(n for k, n in by.items() if k[0] == c)
    print("%s: %d waits longer than 1 ms" % (c, total))
    for k, n in sorted(by.items(), key=lambda x: -x[1]):
        if k[0] == c:
            print("  %4d  %s | %s" % (n, k[1], k[2]))
for c in sorted(set(conf.values()) - set(w[0] for w in waits)):
    print("%s: no wait longer than 1 ms" % c)
