//! What a worker reports about its host: its devices when it joins, and its process's CPU and
//! memory with each heartbeat (from `/proc`, Linux).

use infergate_cluster::messages::{Devices, Gpu, GpuUsage};
use infergate_engine::kernels::device::inventory;
use infergate_engine::kernels::device::nvml::{self, NvmlUsage};
use std::time::Instant;

/// CPU model, cores and RAM of this host.
pub fn devices() -> Devices {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    Devices {
        cpu_model,
        cores: u32::try_from(infergate_engine::sizing::available_cores()).unwrap_or(u32::MAX),
        ram_bytes: meminfo_kib("MemTotal:").unwrap_or(0) * 1024,
        gpus: gpus(),
    }
}

/// The GPUs the CUDA driver sees; none (and the reason logged) without a driver.
fn gpus() -> Vec<Gpu> {
    match inventory::list_gpus() {
        Ok(gpus) => gpus
            .into_iter()
            .map(|g| Gpu {
                name: g.name,
                memory_bytes: g.memory_bytes,
            })
            .collect(),
        Err(e) => {
            tracing::info!(reason = %e, "no GPU reported to the manager");
            Vec::new()
        }
    }
}

/// Memory in use and utilisation of each GPU, for a heartbeat; empty on a host without GPUs
/// (not asked then, so a host without a driver does not probe for one every interval).
/// Utilisation needs NVML: without it, it is absent and the reason is logged once.
pub fn gpu_usage(devices: &Devices) -> Vec<GpuUsage> {
    if devices.gpus.is_empty() {
        return Vec::new();
    }
    let used = match inventory::memory_in_use() {
        Ok(used) => used,
        Err(e) => {
            tracing::warn!(error = %e, "GPU memory query failed; heartbeat without GPU figures");
            return Vec::new();
        }
    };
    let measured = inventory::pci_bus_ids().and_then(|ids| nvml::usage(&ids));
    let measured = match measured {
        Ok(figures) => Some(figures),
        Err(e) => {
            static LOGGED: std::sync::Once = std::sync::Once::new();
            LOGGED.call_once(|| {
                tracing::info!(reason = %e, "GPU utilisation not reported (needs NVML)");
            });
            None
        }
    };
    merge_usage(&used, measured.as_deref())
}

/// The CUDA driver's memory figures (ordinal order) with NVML's for the same devices (matched
/// by PCI bus id, in the same order): NVML's memory and utilisation where it answered for a
/// device, else the driver's memory and no utilisation.
fn merge_usage(cuda_used: &[u64], nvml: Option<&[Option<NvmlUsage>]>) -> Vec<GpuUsage> {
    cuda_used
        .iter()
        .enumerate()
        .map(|(i, &used)| {
            let measured = nvml.and_then(|n| n.get(i).copied().flatten());
            GpuUsage {
                memory_used_bytes: measured.map_or(used, |m| m.memory_used_bytes),
                utilisation_percent: measured.map(|m| f64::from(m.utilisation_percent)),
            }
        })
        .collect()
}

fn meminfo_kib(field: &str) -> Option<u64> {
    kib_field(&std::fs::read_to_string("/proc/meminfo").ok()?, field)
}

fn kib_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// This process's resident memory in bytes.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| kib_field(&s, "VmRSS:"))
        .unwrap_or(0)
        * 1024
}

/// CPU time of this process (user + system), in clock ticks.
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU use of this process between two heartbeats, in percent of one core.
pub struct CpuSampler {
    last: Option<(Instant, u64)>,
}

/// Linux reports CPU times in USER_HZ ticks, 100 a second on every architecture it supports.
const TICKS_PER_SECOND: f64 = 100.0;

impl CpuSampler {
    pub fn new() -> CpuSampler {
        CpuSampler {
            last: cpu_ticks().map(|t| (Instant::now(), t)),
        }
    }

    pub fn sample(&mut self) -> f64 {
        let Some(now_ticks) = cpu_ticks() else {
            return 0.0;
        };
        let now = Instant::now();
        let percent = match self.last {
            Some((then, ticks)) => {
                let wall = now.duration_since(then).as_secs_f64();
                if wall > 0.0 {
                    (now_ticks.saturating_sub(ticks) as f64 / TICKS_PER_SECOND) / wall * 100.0
                } else {
                    0.0
                }
            }
            None => 0.0,
        };
        self.last = Some((now, now_ticks));
        percent
    }
}

impl Default for CpuSampler {
    fn default() -> Self {
        CpuSampler::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_and_process_are_described() {
        let d = devices();
        assert!(d.cores >= 1);
        assert!(d.ram_bytes > 0);
        assert!(rss_bytes() > 0);
        let mut cpu = CpuSampler::new();
        // Burn a little CPU so the sample has something to measure.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu.sample() >= 0.0);
        assert_eq!(kib_field("VmRSS:\t  2048 kB\n", "VmRSS:"), Some(2048));
    }

    #[test]
    fn nvml_figures_are_matched_per_device_and_absent_without_nvml() {
        let cuda = [100, 200];
        // No NVML: the driver's memory, utilisation absent (null in JSON, never 0).
        let without = merge_usage(&cuda, None);
        assert_eq!(without[0].memory_used_bytes, 100);
        assert_eq!(without[1].utilisation_percent, None);
        let json = serde_json::to_value(&without[0]).unwrap();
        assert!(json["utilisation_percent"].is_null(), "{json}");
        // NVML answered for the second device only (matched by bus id, in ordinal order).
        let nvml = [
            None,
            Some(NvmlUsage {
                utilisation_percent: 37,
                memory_used_bytes: 250,
            }),
        ];
        let with = merge_usage(&cuda, Some(&nvml));
        assert_eq!(with[0].memory_used_bytes, 100);
        assert_eq!(with[0].utilisation_percent, None);
        assert_eq!(with[1].memory_used_bytes, 250);
        assert_eq!(with[1].utilisation_percent, Some(37.0));
        // Fewer NVML answers than devices: the rest stay unmeasured.
        assert_eq!(
            merge_usage(&cuda, Some(&nvml[..1]))[1].utilisation_percent,
            None
        );
    }
}
