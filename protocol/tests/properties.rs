//! Property tests of the tensor codecs: every tensor survives JSON and binary encoding, and no
//! input (arbitrary shapes, bytes, header lengths) panics a decoder or makes it allocate more
//! than a small multiple of the input's size.

use infergate_protocol::binary;
use infergate_protocol::contents::{self, TypedContents};
use infergate_protocol::json;
use infergate_protocol::kserve::{decode_inputs, encode_response, parse_request};
use infergate_protocol::message::{inference_request, Incoming};
use infergate_protocol::tensor::{element_count, DataType, Tensor, TensorData};
use proptest::prelude::*;
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Records the largest single allocation made on this thread, so a property can bound what a
/// decoder reserves for a given input.
struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through `alloc`/`realloc` above, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(new_size)));
        // SAFETY: as for `dealloc`; the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// Runs `f` and answers the largest allocation it made.
fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.with(|l| l.set(0));
    f();
    LARGEST.with(Cell::get)
}

/// What a decoder may reserve for `input_len` bytes of input: a BYTES element costs a 24-byte
/// vector for at least 2 bytes of JSON, plus the parser's own small buffers.
fn allocation_bound(input_len: usize) -> usize {
    16 * input_len + (64 << 10)
}

fn datatype() -> impl Strategy<Value = DataType> {
    prop::sample::select(DataType::ALL.to_vec())
}

/// Elements of `datatype` whose JSON form decodes back to the same bits: finite floats (JSON has
/// no NaN or infinity), 0/1 booleans, UTF-8 strings.
fn element(datatype: DataType) -> BoxedStrategy<Vec<u8>> {
    match datatype {
        DataType::Bool => any::<bool>().prop_map(|b| vec![u8::from(b)]).boxed(),
        DataType::Fp16 => any::<u16>()
            .prop_map(half::f16::from_bits)
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| x.to_le_bytes().to_vec())
            .boxed(),
        DataType::Fp32 => any::<f32>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| x.to_le_bytes().to_vec())
            .boxed(),
        DataType::Fp64 => any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| x.to_le_bytes().to_vec())
            .boxed(),
        DataType::Bytes => ".{0,8}".prop_map(String::into_bytes).boxed(),
        fixed => prop::collection::vec(any::<u8>(), fixed.size().unwrap_or(1)).boxed(),
    }
}

fn tensor() -> impl Strategy<Value = Tensor> {
    (datatype(), prop::collection::vec(0i64..4, 0..4)).prop_flat_map(|(datatype, shape)| {
        let count = element_count(&shape).unwrap_or(0);
        prop::collection::vec(element(datatype), count).prop_map(move |elements| {
            let data = match datatype {
                DataType::Bytes => TensorData::Bytes(elements),
                _ => TensorData::Raw(elements.concat()),
            };
            Tensor {
                name: "t".into(),
                datatype,
                shape: shape.clone(),
                data,
            }
        })
    })
}

/// Any shape: huge, negative and overflowing dimensions included.
fn shape() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(
        prop_oneof![0i64..8, any::<i64>(), Just(i64::MAX), Just(1i64 << 36)],
        0..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn tensors_round_trip_through_json(t in tensor()) {
        let body = json!({"inputs": [{"name": "t", "shape": t.shape, "datatype": t.datatype.name(),
            "data": json::encode(&t)}]});
        let mut request = parse_request(&serde_json::to_vec(&body).unwrap()).unwrap();
        prop_assert_eq!(decode_inputs(&mut request, &[]).unwrap(), vec![t]);
    }

    #[test]
    fn tensors_round_trip_through_binary(t in tensor()) {
        let mut bytes = Vec::new();
        binary::encode(&t, &mut bytes);
        let body = json!({"inputs": [{"name": "t", "shape": t.shape, "datatype": t.datatype.name(),
            "parameters": {"binary_data_size": bytes.len()}}]});
        let mut request = parse_request(&serde_json::to_vec(&body).unwrap()).unwrap();
        prop_assert_eq!(decode_inputs(&mut request, &bytes).unwrap(), vec![t]);
    }

    #[test]
    fn answers_decode_as_requests(t in tensor(), as_binary in any::<bool>()) {
        let request = parse_request(
            &serde_json::to_vec(&json!({"inputs": [], "parameters": {"binary_data_output": as_binary}})).unwrap(),
        ).unwrap();
        let (body, json_len) = encode_response(&request, "m", 1, std::slice::from_ref(&t)).unwrap();
        prop_assert_eq!(json_len.is_some(), as_binary);
        let (head, tail) = binary::split_body(&body, json_len).unwrap();
        // An answer's outputs are shaped like a request's inputs.
        let answer: serde_json::Value = serde_json::from_slice(head).unwrap();
        let mut again = parse_request(&serde_json::to_vec(&json!({"inputs": answer["outputs"]})).unwrap()).unwrap();
        prop_assert_eq!(decode_inputs(&mut again, tail).unwrap(), vec![t]);
    }

    #[test]
    fn declared_shapes_never_outgrow_the_data(
        datatype in datatype(),
        shape in shape(),
        bytes in prop::collection::vec(any::<u8>(), 0..64),
        as_json in any::<bool>(),
    ) {
        let text = if as_json {
            serde_json::to_string(&bytes).unwrap()
        } else {
            String::new()
        };
        let input_len = bytes.len() + text.len();
        let largest = largest_allocation(|| {
            if let Ok(count) = infergate_protocol::limits::declared_elements(&shape) {
                let decoded = if as_json {
                    json::decode(datatype, count, &text)
                } else {
                    binary::decode(datatype, count, &bytes)
                };
                if let Ok(data) = decoded {
                    let t = Tensor { name: "t".into(), datatype, shape: shape.clone(), data };
                    assert!(t.check().is_ok(), "decoded data matches the declared shape");
                }
            }
        });
        prop_assert!(largest <= allocation_bound(input_len), "{largest} bytes for {input_len}");
    }

    #[test]
    fn arbitrary_bodies_never_panic(
        body in prop::collection::vec(any::<u8>(), 0..512),
        header_len in prop::option::of(0usize..600),
    ) {
        let largest = largest_allocation(|| {
            if let Ok((head, tail)) = binary::split_body(&body, header_len) {
                if let Ok(mut request) = parse_request(head) {
                    let _ = decode_inputs(&mut request, tail);
                }
            }
        });
        prop_assert!(largest <= allocation_bound(body.len()));
    }

    #[test]
    fn arbitrary_requests_with_absurd_shapes_never_panic(
        datatype in datatype(),
        shape in shape(),
        data in prop_oneof![
            Just(json!([1])), Just(json!(["a"])), Just(json!([[1, 2], [3]])), Just(json!(1e39)),
            Just(json!(null)), Just(json!({"x": 1})), Just(json!([true, -1, 1.5]))
        ],
        binary_size in prop::option::of(0u64..16),
        tail in prop::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut input = json!({"name": "x", "shape": shape, "datatype": datatype.name(), "data": data});
        if let Some(size) = binary_size {
            input["parameters"] = json!({"binary_data_size": size});
        }
        let body = serde_json::to_vec(&json!({"inputs": [input]})).unwrap();
        let largest = largest_allocation(|| {
            let mut request = parse_request(&body).unwrap();
            if let Err(e) = decode_inputs(&mut request, &tail) {
                assert!(e.0.starts_with("input 'x'") || e.0.contains("belong to no input"), "{}", e.0);
            }
        });
        prop_assert!(largest <= allocation_bound(body.len() + tail.len()));
    }

    #[test]
    fn typed_grpc_contents_never_panic(
        datatype in datatype(),
        shape in shape(),
        ints in prop::collection::vec(any::<i32>(), 0..8),
        floats in prop::collection::vec(any::<f32>(), 0..8),
    ) {
        let c = TypedContents { int_contents: &ints, fp32_contents: &floats, ..Default::default() };
        if let Ok(count) = infergate_protocol::limits::declared_elements(&shape) {
            if let Ok(data) = contents::decode(datatype, count, &c) {
                let t = Tensor { name: "t".into(), datatype, shape, data };
                prop_assert!(t.check().is_ok());
            }
        }
    }

    #[test]
    fn websocket_messages_never_panic(text in ".{0,200}", id in any::<i64>(), shape in shape()) {
        let _ = Incoming::parse(&text);
        let message = json!({"id": id, "model": "m", "inputs": [{"name": "x", "shape": shape, "datatype": "FP32", "data": [1]}]});
        match Incoming::parse(&message.to_string()) {
            Incoming::Request(got, body) => {
                prop_assert_eq!(got, json!(id));
                let mut request = inference_request(body).unwrap();
                let _ = decode_inputs(&mut request, &[]);
            }
            _ => prop_assert!(false, "a request message"),
        }
    }
}
