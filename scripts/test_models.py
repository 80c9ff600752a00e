#!/usr/bin/env python3
"""Writes the small ONNX models the engine's tests run, made with the `onnx` package at test time
(never committed as binaries).

Usage: scripts/test_models.py KIND PATH
  string-identity  `text` STRING [N] -> `echo` STRING [N]: the same elements back, byte for byte
                   (BYTES with zero bytes and non-UTF-8 data go through ONNX Runtime and back).
  double           y = x + x over FP32 [N, D] (any shape): tensors of any size for shared
                   memory, compression and the shared-memory benchmark.
  accumulator      a stateful model for sequence batching, batch dimension N:
                     inputs  x FP32 [N,1]; start, ready INT32 [N,1] (control inputs);
                             corrid INT64 [N,1] (control input); acc_in FP32 [N,1] (state)
                     outputs acc_out FP32 [N,1] (state) = acc_in * (1 - start) + x * ready;
                             sum FP32 [N,1] = acc_out; corr INT64 [N,1] = corrid
                   A slot that is not ready keeps its state; a sequence's first request starts
                   from zero whatever state it is given.
  accumulator-string  the same with string correlation ids: corrid and corr STRING [N,1].
Needs: `onnx` (scripts/requirements.txt, installed by scripts/setup.sh).
"""
import argparse

import onnx
from onnx import TensorProto, helper


def string_identity():
    text = helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])
    echo = helper.make_tensor_value_info("echo", TensorProto.STRING, ["N"])
    nodes = [helper.make_node("Identity", ["text"], ["echo"])]
    return helper.make_graph(nodes, "string_identity", [text], [echo])


def double():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "D"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "D"])
    return helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double", [x], [y])


def accumulator(corrid=TensorProto.INT64):
    def io(name, kind):
        return helper.make_tensor_value_info(name, kind, ["N", 1])

    inputs = [
        io("x", TensorProto.FLOAT),
        io("start", TensorProto.INT32),
        io("ready", TensorProto.INT32),
        io("corrid", corrid),
        io("acc_in", TensorProto.FLOAT),
    ]
    outputs = [io("acc_out", TensorProto.FLOAT), io("sum", TensorProto.FLOAT), io("corr", corrid)]
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [
        helper.make_node("Cast", ["start"], ["start_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["ready"], ["ready_f"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "start_f"], ["keep"]),
        helper.make_node("Mul", ["acc_in", "keep"], ["kept"]),
        helper.make_node("Mul", ["x", "ready_f"], ["added"]),
        helper.make_node("Add", ["kept", "added"], ["acc_out"]),
        helper.make_node("Identity", ["acc_out"], ["sum"]),
        helper.make_node("Identity", ["corrid"], ["corr"]),
    ]
    return helper.make_graph(nodes, "accumulator", inputs, outputs, initializer=[one])


def accumulator_string():
    return accumulator(TensorProto.STRING)


KINDS = {"string-identity": string_identity, "double": double, "accumulator": accumulator,
         "accumulator-string": accumulator_string}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=sorted(KINDS))
    ap.add_argument("path")
    args = ap.parse_args()
    model = helper.make_model(KINDS[args.kind](), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, args.path)


if __name__ == "__main__":
    main()
