//! A worker's model file cache: files fetched from the manager live in its data directory under
//! a disk budget; when a new file would exceed it, the least recently used files that no loaded
//! model version needs are removed first.

use std::time::Instant;

/// One cached file as the eviction decision sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cached {
    pub sha256: String,
    pub bytes: u64,
    /// When a request last used it in this process; `None`: not since start (oldest).
    pub last_used: Option<Instant>,
    /// A loaded model version runs from it: never evicted.
    pub in_use: bool,
}

/// The files to remove so that `incoming` more bytes fit in `budget`, least recently used
/// first. May not reach the budget when the files in use alone exceed it (the caller still
/// stores the new file: a request must not fail for the cache's sake).
pub fn evict(files: &[Cached], incoming: u64, budget: u64) -> Vec<String> {
    let mut total: u64 = files.iter().map(|f| f.bytes).sum::<u64>() + incoming;
    let mut candidates: Vec<&Cached> = files.iter().filter(|f| !f.in_use).collect();
    // `None` sorts before `Some`: files unused since start go first.
    candidates.sort_by_key(|f| f.last_used);
    let mut out = Vec::new();
    for f in candidates {
        if total <= budget {
            break;
        }
        total -= f.bytes;
        out.push(f.sha256.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn file(sha: &str, bytes: u64, used: Option<u64>, in_use: bool, t0: Instant) -> Cached {
        Cached {
            sha256: sha.into(),
            bytes,
            last_used: used.map(|s| t0 + Duration::from_secs(s)),
            in_use,
        }
    }

    #[test]
    fn least_recently_used_files_go_first_and_files_in_use_stay() {
        let t0 = Instant::now();
        let files = [
            file("recent", 40, Some(9), false, t0),
            file("old", 40, Some(1), false, t0),
            file("loaded", 40, Some(0), true, t0),
            file("from-before", 10, None, false, t0),
        ];
        // 130 cached + 30 incoming, budget 100: 60 must go.
        assert_eq!(evict(&files, 30, 100), ["from-before", "old", "recent"]);
        assert_eq!(evict(&files, 0, 130), Vec::<String>::new());
        assert_eq!(evict(&files, 0, 125), ["from-before"]);
        // The loaded file alone is over the budget: everything else goes, it stays.
        assert_eq!(evict(&files, 0, 10).len(), 3);
    }
}
