#!/usr/bin/env python3
"""Architecture lint for src/: the layer rules and no import circles.

Layers, bottom to top (a module may use only modules of its own layer or below):
  codegen, driver  -- Program -> PTX (pure) and the CUDA driver FFI; neither uses the
                      other, and neither uses vyre_driver
  compat           -- what differs between the vyre lines served (ids, resident handles)
  error            -- CudaError and the one boundary to vyre's BackendError
  backend          -- dispatch, resident buffers, caches, pools
  artifact, optimizer -- vyre's artifact route and optimizer traits on the backend
  adapter          -- VyreBackend and the registration of everything above
Circles: the module-level import graph (a file is a module; uses between a module and
its own ancestors or descendants are one module split over files and do not count) has
no cycle. Prints the layer graph; exits 1 on any violation.
"""
import os, re, sys
from collections import defaultdict

LAYER = {"codegen": 0, "driver": 0, "compat": 1, "error": 2, "backend": 3, "artifact": 4, "optimizer": 4, "adapter": 5, "bin": 6, "lib": 6}
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def module_of(path):
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return tuple(rel)


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    return re.sub(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", "", text, flags=re.S)


def expand(tree):
    """Paths of a use tree such as `super::{a::B, c}`."""
    tree = tree.replace(" ", "").replace("\n", "")
    m = re.match(r"^([\w:]*?)::?\{(.*)\}$", tree)
    if not m:
        return [tree]
    head, body = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur); cur = ""; continue
        depth += ch == "{"; depth -= ch == "}"; cur += ch
    parts.append(cur)
    return [f"{head}::{p}" if head else p for sub in parts if sub for p in expand(sub)]


def resolve(module, path, modules):
    segs = path.split("::")
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = module
        while segs and segs[0] in ("super", "self"):
            base = base[:-1] if segs[0] == "super" else base
            segs = segs[1:]
    else:
        return None
    target = base
    for seg in segs:
        if target + (seg,) in modules:
            target += (seg,)
        else:
            break
    return target


def main():
    files = {}
    for root, _, names in os.walk(ROOT):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[module_of(path)] = strip(open(path).read())
    modules = set(files)
    edges = defaultdict(set)
    problems = []
    for module, text in files.items():
        if module and module[0] in ("codegen", "driver") and "vyre_driver" in text:
            problems.append(f"{'::'.join(module)} uses vyre_driver")
        paths = [p for m in re.finditer(r"\buse\s+([^;]+);", text) for p in expand(m.group(1))]
        paths += re.findall(r"\b(?:crate|super)(?:::\w+)+", text)
        for path in paths:
            target = resolve(module, path, modules)
            if target is None or target == module:
                continue
            related = target[: len(module)] == module or module[: len(target)] == target
            if not related:
                edges[module].add(target)
    layer_edges = defaultdict(set)
    for src, targets in edges.items():
        for dst in targets:
            a, b = (src[0] if src else "lib"), (dst[0] if dst else "lib")
            if a == b:
                continue
            layer_edges[a].add(b)
            if LAYER.get(b, 9) >= LAYER.get(a, 9) and a != "lib":
                problems.append(f"{'::'.join(src)} -> {'::'.join(dst)} runs up or across a layer")
    # Cycles (Tarjan).
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)
    sys.setrecursionlimit(10000)
    for v in list(modules):
        if v not in index:
            visit(v)
    for comp in sccs:
        problems.append("import circle: " + " <-> ".join(sorted("::".join(m) for m in comp)))
    for layer in sorted(layer_edges, key=lambda l: -LAYER.get(l, 9)):
        print(f"{layer} -> {', '.join(sorted(layer_edges[layer]))}")
    for p in sorted(set(problems)):
        print("LAYER VIOLATION:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
