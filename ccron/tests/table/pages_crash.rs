//! Crash tests of the reserved-page backends with a real process kill: the test binary spawns
//! itself in a child mode that writes complete "saves" (every page of the store, generation
//! after generation) through `FilePages` (and `RedbPages` with the `redb` feature), the parent
//! kills it with SIGKILL at a varying moment, reopens the store and checks that every page holds
//! exactly the content of one complete generation (never torn, never a mix within a page), and
//! that the generations are those of writes in page order: a prefix of pages at generation g and
//! the rest at g - 1. The `-batch` modes write each generation as one `save_batch`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use ccron::{FilePages, PageId, ReservedPages};

const PAGES: u32 = 12;
const PAGE_SIZE: usize = 1_024;
const CHILD_ENV: &str = "CCRON_PAGES_CRASH_CHILD";

/// The content generation `g` writes to page `id`: its length varies with both, so a truncated
/// or swapped page cannot pass.
fn content(g: u64, id: PageId) -> Vec<u8> {
    let len = 16 + ((g as usize * 131 + id as usize * 17) % (PAGE_SIZE - 16));
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&g.to_le_bytes());
    v.extend_from_slice(&u64::from(id).to_le_bytes());
    let mut x = g.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(id);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v
}

fn open(backend: &str, dir: &Path) -> Box<dyn ReservedPages> {
    match backend.trim_end_matches("-batch") {
        "file" => Box::new(FilePages::open(dir, PAGE_SIZE, PAGES).unwrap()),
        #[cfg(feature = "redb")]
        "redb" => Box::new(
            ccron::redb_pages::RedbPages::open(&dir.join("pages.redb"), PAGE_SIZE, PAGES).unwrap(),
        ),
        other => panic!("unknown backend {other}"),
    }
}

/// The child: writes generations 1, 2, ... of every page, in page order, until killed.
#[test]
#[ignore = "child mode of the crash tests, spawned by them"]
fn child_writer() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (backend, dir) = spec.split_once(':').unwrap();
    let mut pages = open(backend, Path::new(dir));
    // Resume where the killed child stopped: finish its generation, then go on.
    let gens: Vec<u64> = (0..PAGES)
        .map(|id| {
            pages
                .load(id)
                .unwrap()
                .map_or(0, |b| u64::from_le_bytes(b[..8].try_into().unwrap()))
        })
        .collect();
    let top = gens[0];
    let (mut g, mut from) = match gens.iter().position(|x| *x != top) {
        Some(i) => (top, i as u32),
        None => (top + 1, 0),
    };
    let batch = backend.ends_with("-batch");
    println!("writing");
    loop {
        if batch {
            // A generation's pages as one `save_batch` (one sync round).
            let images: Vec<(PageId, Vec<u8>)> =
                (from..PAGES).map(|id| (id, content(g, id))).collect();
            let writes: Vec<(PageId, &[u8])> =
                images.iter().map(|(id, c)| (*id, c.as_slice())).collect();
            pages.save_batch(&writes).unwrap();
        } else {
            for id in from..PAGES {
                pages.save(id, &content(g, id)).unwrap();
            }
        }
        g += 1;
        from = 0;
    }
}

/// Every page holds one complete generation; generations fall by at most one, once, in page
/// order. Returns the generation of page 0.
fn check(backend: &str, dir: &Path) -> u64 {
    let pages = open(backend, dir);
    let mut gens = Vec::new();
    for id in 0..PAGES {
        let Some(bytes) = pages.load(id).unwrap() else {
            gens.push(0);
            continue;
        };
        let g = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert_eq!(bytes, content(g, id), "{backend}: page {id} is torn");
        gens.push(g);
    }
    let top = gens[0];
    let drops = gens.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        gens.iter().all(|g| *g == top || *g + 1 == top) && drops <= 1,
        "{backend}: generations {gens:?} are not those of writes in page order"
    );
    top
}

fn kill_repeatedly(backend: &str) {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "ccron-pages-crash-{backend}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    // The child's test name as libtest knows it: its module path without the crate's name
    // (`pages_crash::child_writer` in the `table` test binary).
    let child_test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::child_writer"),
        None => "child_writer".to_string(),
    };
    let mut last = 0;
    for round in 0..6u64 {
        let mut child = Command::new(&exe)
            .args(["--ignored", "--exact", &child_test, "--nocapture"])
            .env(CHILD_ENV, format!("{backend}:{}", dir.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the child writes, then kill it at a different moment each round.
        let out = child.stdout.take().unwrap();
        let started = BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .any(|l| l == "writing");
        assert!(started, "{backend}: the child started writing");
        std::thread::sleep(Duration::from_millis(5 + 29 * round));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "{backend}: the child was killed");
        let top = check(backend, &dir);
        assert!(top >= last, "{backend}: generations go forward");
        last = top;
    }
    assert!(last > 0, "{backend}: the children wrote something");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn file_pages_killed_during_writes_hold_complete_pages() {
    kill_repeatedly("file");
}

#[cfg(feature = "redb")]
#[test]
fn redb_pages_killed_during_writes_hold_complete_pages() {
    kill_repeatedly("redb");
}

/// The same with every generation written as one `save_batch`: a kill inside a batch leaves
/// every page complete, a prefix of the batch new (renames in order) and the rest old.
#[test]
fn file_pages_killed_during_batches_hold_complete_pages() {
    kill_repeatedly("file-batch");
}

#[cfg(feature = "redb")]
#[test]
fn redb_pages_killed_during_batches_hold_complete_pages() {
    kill_repeatedly("redb-batch");
}
