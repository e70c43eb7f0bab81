#!/usr/bin/env python3
"""Counts the crate's public surface: every public item (struct, enum,
trait, function, type alias, constant, macro) and every public method
(inherent methods of public types, required and provided methods of
public traits), per top-level module, from the HTML `cargo doc` writes.

    cargo doc --no-deps --all-features
    python3 docs/public-items.py          # per-module counts and the total
    python3 docs/public-items.py -v       # and each item with its methods

Struct fields and enum variants are not counted; trait implementations
(`Clone`, `Service`, `From`, ...) are not counted. Re-exports are counted
once, where rustdoc documents the item. See docs/ARCHITECTURE.md for the
figures before and after issue 23.
"""
import os, re, sys, collections
args = [a for a in sys.argv[1:] if a != "-v"]
root = args[0] if args else "target/doc/tower_model_balance"
VERBOSE = "-v" in sys.argv; detail = []
items = collections.Counter(); methods = collections.Counter()
for dp, _, fs in os.walk(root):
    for f in fs:
        m = re.match(r"(struct|enum|trait|fn|type|constant|macro|static|union|traitalias)\.(.+)\.html$", f)
        if not m: continue
        kind = m.group(1); path = os.path.join(dp, f)
        html = open(path, encoding="utf-8").read()
        if 'http-equiv="refresh"' in html: continue   # re-export redirect
        mod = os.path.relpath(dp, root).split(os.sep)[0]
        items[mod] += 1
        if VERBOSE: detail.append((os.path.relpath(path, root), kind))
        if kind in ("struct", "enum", "union"):
            s = html.find('id="implementations"')
            ends = [x for x in (html.find(k, s + 1) for k in ('id="trait-implementations"', 'id="synthetic-implementations"', 'id="blanket-implementations"')) if x > 0]
            e = min(ends) if ends else -1
            if s < 0: continue
            region = html[s: e if e > 0 else len(html)]
            ms = re.findall(r'<section id="method\.([^"]+)"', region)
            methods[mod] += len(ms)
            if VERBOSE: detail[-1] = detail[-1] + (ms,)
        elif kind == "trait":
            e = html.find('id="implementors"')
            region = html[: e if e > 0 else len(html)]
            # `name-1`, `name-2`: the same method again (implementations on
            # foreign types, dyn-compatibility notes): counted once.
            ms = sorted({re.sub(r"-[0-9]+$", "", m) for m in re.findall(r'<section id="(?:ty)?method\.([^"]+)"', region)})
            methods[mod] += len(ms)
            if VERBOSE: detail[-1] = detail[-1] + (ms,)
tot_i = sum(items.values()); tot_m = sum(methods.values())
for mod in sorted(set(items) | set(methods)):
    print(f"{mod:12} items {items[mod]:4}  methods {methods[mod]:4}  total {items[mod]+methods[mod]:4}")
print(f"{'all':12} items {tot_i:4}  methods {tot_m:4}  total {tot_i+tot_m:4}")

if VERBOSE:
    for d in sorted(detail):
        ms = d[2] if len(d) > 2 else []
        print(f"{1+len(ms):3} {d[0]}  {' '.join(ms)}")
