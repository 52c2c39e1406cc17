"""How an e-graph node reads as an equation: the one place that knows which primitive (and which
wire params) each term constructor stands for. Pricing reads it to cost a node as the equation it
is; emission reads it to write the program back out."""
from __future__ import annotations

from typing import Any

from rewrites.egraph_view import BodyNode, EClass, ENode
from rewrites.params import ParamsTable

LEAF_OPS = frozenset(["var", "lit", "flit"])  # term nodes that are values, not equations


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def node_equation(node: ENode | BodyNode, eclass: EClass, table: ParamsTable) -> tuple[str, dict[str, Any]]:
    """(primitive name, wire params) of a term or body node that is an equation (not var/lit/arg)."""
    a = node.attrs
    match node.op:
        case "unary" | "binary":
            return a[0], table.get(a[1])
        case "select":
            return "select_n", {}
        case "dot":
            return "dot_general", {"dimension_numbers": [[_ints(a[0]), _ints(a[1])], [_ints(a[2]), _ints(a[3])]],
                                   **table.get(a[4])}
        case "transpose":
            return "transpose", {"permutation": _ints(a[0])}
        case "reshape":
            return "reshape", {"new_sizes": _ints(a[0]), **table.get(a[1])}
        case "broadcast":
            return "broadcast_in_dim", {"shape": _ints(a[0]), "broadcast_dimensions": _ints(a[1]), **table.get(a[2])}
        case "reduce":
            return a[0], {"axes": _ints(a[1]), **table.get(a[2])}
        case "convert":
            return "convert_element_type", {"new_dtype": {"dtype": a[0]}, **table.get(a[1])}
        case "concat":
            return "concatenate", {"dimension": int(a[0])}
        case "slice":
            return "slice", {"start_indices": _ints(a[0]), "limit_indices": _ints(a[1]),
                             "strides": _ints(a[2]) or None}
        case "squeeze":
            return "squeeze", {"dimensions": _ints(a[0])}
        case "expand_dims":
            kept = [d for d in range(len(eclass.shape)) if d not in set(a[0])]
            return "broadcast_in_dim", {"shape": list(eclass.shape), "broadcast_dimensions": kept,
                                        "sharding": None}
        case "integer_pow":
            return "integer_pow", {"y": int(a[0])}
        case "conv":
            return "conv_general_dilated", table.get(a[2])
        case "opaque":
            entry = table.get(a[1])
            return entry["primitive"], entry["params"]
        case "softmax" | "layer_norm" | "attention":
            return node.op, {}
        case "gelu":
            return "gelu", {"approximate": bool(a[0])}
    raise ValueError(f"term {node.op} is not an equation")
