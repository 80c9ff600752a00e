//! Triton's system shared-memory extension for every transport: a caller's regions (register,
//! unregister, status), inputs read from them and outputs written into them.
//!
//! Shared memory only works between processes of one host, so it is offered to callers on
//! loopback only (a caller elsewhere is told so), and only while `[shared_memory] enabled`.
//! Regions belong to the caller that registered them ([`Caller::owner`]): another key neither
//! sees nor uses them; the anonymous callers (loopback, when anonymous access is on) share one
//! set among themselves, as they share the machine. Sizes and offsets are checked against the
//! region and the tensor before any copy, and the object's real size before each use
//! (`infergate_shm`).

use crate::caller::Caller;
use crate::error::{ApiError, ApiResult, Kind};
use crate::state::AppState;
use infergate_engine::{DataType, Tensor, TensorData};
use infergate_shm::{ErrorKind, RegionStatus, SharedMemory, ShmError};
use serde_json::{Map, Value};
use std::net::IpAddr;

/// Where a tensor's bytes lie: request parameters `shared_memory_region`,
/// `shared_memory_byte_size` and (optional, default 0) `shared_memory_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmRef {
    pub region: String,
    pub byte_size: u64,
    pub offset: u64,
}

impl ShmRef {
    /// The reference `parameters` hold, if any; `what` names the tensor in errors (Triton
    /// requires the region and the byte size together).
    pub fn of(parameters: &Map<String, Value>, what: &str) -> ApiResult<Option<ShmRef>> {
        let Some(region) = parameters.get("shared_memory_region") else {
            return Ok(None);
        };
        let region = region.as_str().ok_or_else(|| {
            ApiError::bad_request(format!("{what}: Unable to parse 'shared_memory_region'"))
        })?;
        let number = |name: &str| -> ApiResult<Option<u64>> {
            parameters
                .get(name)
                .map(|v| {
                    v.as_u64().ok_or_else(|| {
                        ApiError::bad_request(format!("{what}: Unable to parse '{name}'"))
                    })
                })
                .transpose()
        };
        let byte_size = number("shared_memory_byte_size")?.ok_or_else(|| {
            ApiError::bad_request(format!(
                "{what}: 'shared_memory_byte_size' must be given with 'shared_memory_region'"
            ))
        })?;
        Ok(Some(ShmRef {
            region: region.to_string(),
            byte_size,
            offset: number("shared_memory_offset")?.unwrap_or(0),
        }))
    }
}

/// One caller's regions.
pub struct Regions<'a> {
    shm: &'a SharedMemory,
    owner: String,
}

/// The regions of `caller`, calling from `client`: refused when shared memory is off or the
/// caller is not on this host.
pub fn regions<'a>(
    state: &'a AppState,
    caller: &Caller,
    client: Option<IpAddr>,
) -> ApiResult<Regions<'a>> {
    let shm = state.shared_memory().ok_or_else(|| {
        ApiError::new(
            Kind::Unsupported,
            "system shared memory is disabled on this server ([shared_memory] enabled = false)",
        )
    })?;
    match client {
        Some(addr) if addr.to_canonical().is_loopback() => Ok(Regions {
            shm,
            owner: caller.owner(),
        }),
        Some(addr) => Err(ApiError::bad_request(format!(
            "system shared memory is offered to callers on this server's own host only; this request comes from {}",
            addr.to_canonical()
        ))),
        None => Err(ApiError::bad_request(
            "system shared memory is offered to callers on this server's own host only, and this request's address is unknown",
        )),
    }
}

/// Triton's answer to a CUDA shared-memory registration on a host without GPUs; infergate
/// serves system shared memory only.
pub fn cuda_register_refused(name: &str) -> ApiError {
    ApiError::bad_request(format!(
        "failed to register CUDA shared memory region: '{name}', GPUs not supported (infergate serves system shared memory only: register the tensor's bytes with register_system_shared_memory)"
    ))
}

/// A shared-memory failure, as the service reports it.
pub fn error(e: ShmError) -> ApiError {
    let kind = match e.kind {
        ErrorKind::InvalidArgument => Kind::Invalid,
        ErrorKind::NotFound => Kind::NotFound,
        ErrorKind::LimitExceeded => Kind::RateLimited,
        ErrorKind::Internal => Kind::Internal,
    };
    ApiError::new(kind, e.message)
}

impl Regions<'_> {
    /// Registers `byte_size` bytes at `offset` of the object `key` as region `name`.
    pub fn register(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> ApiResult<()> {
        self.shm
            .register(&self.owner, name, key, offset, byte_size)
            .map_err(error)
    }

    /// Unregisters region `name`, or every region of the caller; an unknown name is no error
    /// (as in Triton). Requests using a region finish on it.
    pub fn unregister(&self, name: Option<&str>) {
        self.shm.unregister(&self.owner, name);
    }

    /// The caller's regions, or region `name` (NotFound when it has none of that name).
    pub fn status(&self, name: Option<&str>) -> ApiResult<Vec<RegionStatus>> {
        self.shm.status(&self.owner, name).map_err(error)
    }

    /// An input's data: `count` elements of `datatype` at the reference. Its byte size is
    /// checked against what the datatype and shape need before anything is read (BYTES: the
    /// length-prefixed elements must fill it exactly).
    pub fn read_input(
        &self,
        at: &ShmRef,
        datatype: DataType,
        count: usize,
    ) -> ApiResult<TensorData> {
        if let Some(size) = datatype.size() {
            let needed = (size as u64).saturating_mul(count as u64);
            if at.byte_size != needed {
                return Err(ApiError::bad_request(format!(
                    "shared memory region '{}': byte size {} does not match the {needed} bytes the tensor's datatype and shape need",
                    at.region, at.byte_size
                )));
            }
        }
        let bytes = self
            .shm
            .read(&self.owner, &at.region, at.offset, at.byte_size)
            .map_err(error)?;
        infergate_protocol::binary::decode(datatype, count, &bytes).map_err(ApiError::bad_request)
    }

    /// Writes each output asked for in shared memory into its region: its binary encoding
    /// (fixed-size elements as they are, BYTES length-prefixed), refused before anything is
    /// written when it does not fit the reference's byte size.
    pub fn write_outputs(&self, wanted: &[(String, ShmRef)], outputs: &[Tensor]) -> ApiResult<()> {
        for (name, at) in wanted {
            let Some(tensor) = outputs.iter().find(|t| &t.name == name) else {
                continue;
            };
            let len = infergate_protocol::binary::encoded_len(tensor) as u64;
            if len > at.byte_size {
                return Err(ApiError::bad_request(format!(
                    "shared memory size specified with the request for output '{name}' ({} bytes) should be at least {len} bytes to hold the results",
                    at.byte_size
                )));
            }
            let bytes = match &tensor.data {
                TensorData::Raw(raw) => std::borrow::Cow::Borrowed(&raw[..]),
                TensorData::Bytes(_) => {
                    let mut out = Vec::with_capacity(len as usize);
                    infergate_protocol::binary::encode(tensor, &mut out);
                    std::borrow::Cow::Owned(out)
                }
            };
            self.shm
                .write(&self.owner, &at.region, at.offset, &bytes)
                .map_err(error)?;
        }
        Ok(())
    }
}

/// A request's way to its caller's regions, looked up on first use: most requests use none.
pub struct RequestRegions<'a> {
    state: &'a AppState,
    caller: &'a Caller,
    client: Option<IpAddr>,
    regions: Option<Regions<'a>>,
}

impl<'a> RequestRegions<'a> {
    pub fn new(state: &'a AppState, caller: &'a Caller, client: Option<IpAddr>) -> Self {
        RequestRegions {
            state,
            caller,
            client,
            regions: None,
        }
    }

    fn regions(&mut self) -> ApiResult<&Regions<'a>> {
        match self.regions {
            Some(ref regions) => Ok(regions),
            None => Ok(self
                .regions
                .insert(regions(self.state, self.caller, self.client)?)),
        }
    }

    /// The data of an input whose `parameters` name a region; `None` for any other input.
    pub fn read_input(
        &mut self,
        parameters: &Map<String, Value>,
        datatype: DataType,
        count: usize,
    ) -> ApiResult<Option<TensorData>> {
        let Some(at) = ShmRef::of(parameters, "input")? else {
            return Ok(None);
        };
        self.regions()?.read_input(&at, datatype, count).map(Some)
    }

    /// Writes the outputs asked for in shared memory (none: nothing is looked up).
    pub fn write_outputs(
        &mut self,
        wanted: &[(String, ShmRef)],
        outputs: &[Tensor],
    ) -> ApiResult<()> {
        if wanted.is_empty() {
            return Ok(());
        }
        self.regions()?.write_outputs(wanted, outputs)
    }
}

/// The outputs a request asks for in shared memory, by name (`parameters` of each requested
/// output).
pub fn output_refs<'a>(
    outputs: impl IntoIterator<Item = (&'a str, &'a Map<String, Value>)>,
) -> ApiResult<Vec<(String, ShmRef)>> {
    let mut refs = Vec::new();
    for (name, parameters) in outputs {
        if let Some(at) = ShmRef::of(parameters, &format!("output '{name}'"))? {
            refs.push((name.to_string(), at));
        }
    }
    Ok(refs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_need_the_region_and_its_size() {
        let of = |v: Value| ShmRef::of(v.as_object().unwrap(), "input 'x'");
        assert_eq!(of(json!({})).unwrap(), None);
        assert_eq!(
            of(json!({"shared_memory_region": "r", "shared_memory_byte_size": 64, "shared_memory_offset": 8}))
                .unwrap(),
            Some(ShmRef {
                region: "r".into(),
                byte_size: 64,
                offset: 8
            })
        );
        for bad in [
            json!({"shared_memory_region": "r"}),
            json!({"shared_memory_region": 3, "shared_memory_byte_size": 4}),
            json!({"shared_memory_region": "r", "shared_memory_byte_size": -4}),
            json!({"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": "x"}),
        ] {
            let e = of(bad.clone()).unwrap_err();
            assert_eq!(e.kind, Kind::Invalid, "{bad}");
            assert!(e.message.starts_with("input 'x'"), "{}", e.message);
        }
    }
}
