#!/usr/bin/env python3
"""Writes a tiny ONNX model, y = x + x over FP32 [batch, 16], for the tests and benchmarks that
need a model whose runs take microseconds (the serving path around it is what they measure).

Usage: scripts/tiny_model.py PATH [--dynamic-batch]
  --dynamic-batch  the batch dimension is symbolic ("N", for a model served with batching);
                   without it the model takes exactly [1, 16].
Needs: `onnx` (scripts/requirements.txt, installed by scripts/setup.sh).
"""
import argparse

import onnx
from onnx import TensorProto, helper


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("--dynamic-batch", action="store_true")
    args = ap.parse_args()
    batch = "N" if args.dynamic_batch else 1
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 16])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "tiny", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, args.path)


if __name__ == "__main__":
    main()
