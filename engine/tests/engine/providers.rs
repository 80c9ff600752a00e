//! Execution providers and run failures on the real ONNX Runtime: a GPU provider that cannot
//! be used leaves the model on the CPU with the reason reported, and a run that runs out of
//! memory fails its batch as "unavailable" (503) while the model keeps serving.

use crate::common::*;
use infergate_engine::kernels::DeviceChoice;
use infergate_engine::session::is_out_of_memory;
use infergate_engine::{EngineError, Fault, Tensor};
use std::path::{Path, PathBuf};

/// A one-node model that allocates a float tensor of the shape it is given
/// (`ConstantOfShape`), written with the `onnx` package of the setup's Python.
fn allocating_model(dir: &Path) -> PathBuf {
    let python = std::env::var("INFERGATE_PYTHON")
        .expect("INFERGATE_PYTHON must be set when ORT_DYLIB_PATH is (source .cache/env.sh)");
    let path = dir.join("alloc.onnx");
    let script = r#"
import sys, onnx
from onnx import helper, TensorProto
node = helper.make_node("ConstantOfShape", ["shape"], ["out"],
                        value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))
graph = helper.make_graph([node], "alloc",
    [helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
    [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
"#;
    let status = std::process::Command::new(python)
        .args(["-c", script])
        .arg(&path)
        .status()
        .expect("run python");
    assert!(status.success(), "writing the test model failed");
    path
}

fn shape(len: i64) -> Vec<Tensor> {
    vec![Tensor::from_i64("shape", vec![1], &[len]).unwrap()]
}

#[tokio::test]
async fn out_of_memory_fails_the_batch_as_unavailable_and_the_model_keeps_serving() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = allocating_model(dir.path());
    let k = key("alloc", 1);

    let out = engine.infer(&k, &path, shape(4), vec![]).await.unwrap();
    assert_eq!(out[0].to_f32().unwrap(), vec![1.0; 4]);

    // 2^48 floats (1 PiB) is beyond any address space: ORT's allocator fails for real.
    let e = engine
        .infer(&k, &path, shape(1 << 48), vec![])
        .await
        .unwrap_err();
    let message = e.to_string();
    eprintln!("ORT's error: {message}");
    assert!(
        matches!(e, EngineError::Unavailable(_)) && e.fault() == Fault::Unavailable,
        "{e:?}"
    );
    assert!(message.contains("ran out of memory"), "{message}");
    assert!(is_out_of_memory(&message));

    // A real failure that is not about memory stays the model's fault.
    let e = engine
        .infer(&k, &path, shape(-3), vec![])
        .await
        .unwrap_err();
    eprintln!("ORT's error: {e}");
    assert_eq!(e.fault(), Fault::Model, "{e:?}");

    // The same model still serves.
    let out = engine.infer(&k, &path, shape(3), vec![]).await.unwrap();
    assert_eq!(out[0].to_f32().unwrap(), vec![1.0; 3]);
}

#[test]
fn out_of_memory_messages_of_the_cuda_and_arena_allocators_are_recognised() {
    // The first as ONNX Runtime 1.31 reported it in the test above; the others in the wording
    // of its sources (cuda_call.cc, cuda_allocator.cc, bfc_arena.cc under a memory limit).
    for message in [
        "Non-zero status code returned while running ConstantOfShape node. Name:'' Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:360 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*) Failed to allocate memory for requested buffer of size 1125899906842624",
        "Non-zero status code returned while running Conv node. Name:'/conv' Status Message: /onnxruntime_src/onnxruntime/core/framework/bfc_arena.cc:376 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size 4294967296",
        "/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_call.cc:123 std::conditional_t<THRW, void, onnxruntime::common::Status> onnxruntime::CudaCall(ERRTYPE, const char*, const char*, ERRTYPE, const char*, const char*, int) [with ERRTYPE = cudaError; bool THRW = true] CUDA failure 2: out of memory ; GPU=0 ; hostname=gpu-1 ; file=/onnxruntime_src/onnxruntime/core/providers/cuda/cuda_allocator.cc ; line=47 ; expr=cudaMalloc((void**)&p, size);",
        "Available memory of 1048576 is smaller than requested bytes of 4194304",
        "CUBLAS failure 3: CUBLAS_STATUS_ALLOC_FAILED ; GPU=0",
        "std::bad_alloc",
    ] {
        assert!(is_out_of_memory(message), "{message}");
    }
    for message in [
        "Non-zero status code returned while running ConstantOfShape node. Name:'' Status Message: /onnxruntime_src/onnxruntime/core/framework/op_kernel.cc:87 virtual OrtValue* onnxruntime::OpKernelContext::OutputMLValue(int, const onnxruntime::TensorShape&) [ONNXRuntimeError] : 1 : FAIL : tensor.cc:57 CalculateTensorStorageSize Tensor shape.Size() must be >= 0",
        "Got invalid dimensions for input: input for the following indices index: 2 Got: 225 Expected: 224",
        "Non-zero status code returned while running Reshape node. Name:'/reshape' Status Message: The input tensor cannot be reshaped to the requested shape.",
    ] {
        assert!(!is_out_of_memory(message), "{message}");
    }
}

#[tokio::test]
async fn an_unusable_gpu_provider_leaves_the_model_on_the_cpu_with_the_reason() {
    let Some(engine) = engine(|c| c.device = DeviceChoice::Cuda(0)) else {
        return;
    };
    let path = model("ocr-cls.onnx");
    let k = key("cls", 1);
    engine
        .set_config(
            &k,
            config(
                r#"{"optimization": {"execution_accelerators": {"gpu_execution_accelerator": [
                    {"name": "tensorrt", "parameters": {"precision_mode": "FP16"}}]}}}"#,
            ),
        )
        .await
        .unwrap();
    engine.load(&k, &path).await.unwrap();
    let report = engine.execution(&k).unwrap();
    assert_eq!(report.providers.last().unwrap(), "CPUExecutionProvider");
    if !report.on_gpu() {
        // This machine: a CPU-only ONNX Runtime and no GPU. Both requested providers are
        // named in the reason.
        let reason = report.fallback.clone().expect("a reason");
        assert!(
            reason.contains("TensorrtExecutionProvider")
                && reason.contains("CUDAExecutionProvider"),
            "{reason}"
        );
    }
    // Served either way.
    let input = Tensor::from_f32("x", vec![1, 3, 48, 192], &values(1, 3 * 48 * 192)).unwrap();
    let out = engine.infer(&k, &path, vec![input], vec![]).await.unwrap();
    assert_eq!(out[0].shape, vec![1, 2]);
    let info = engine.model_info(&k).unwrap();
    assert_eq!(info.execution, report);
}
