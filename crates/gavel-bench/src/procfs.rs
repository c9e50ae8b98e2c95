//! Reading CPU time and resident memory of processes from Linux `/proc`.
//!
//! Everything here is plain file parsing (no `unsafe`): CPU times come from
//! `/proc/<pid>/stat` (fields 14 `utime` and 15 `stime`, in clock ticks), the
//! tick rate from the `AT_CLKTCK` entry of `/proc/self/auxv`, resident
//! memory and its peak from the `VmRSS` and `VmHWM` lines of
//! `/proc/<pid>/status`, and the machine's available memory from the
//! `MemAvailable` line of `/proc/meminfo`. For `gavel-lab bench --cost`: the
//! I/O counters of `/proc/<pid>/io` and the context switches of each live
//! thread's `/proc/<pid>/task/<tid>/status`.

use std::path::Path;

/// Why a `/proc` file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ProcfsError {
    /// The file could not be read (the process is gone, or this is not Linux).
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file's text is not what Linux writes there.
    #[error("parsing {path}: {detail}")]
    Parse {
        /// The file (or `text` for bare text).
        path: String,
        /// What is wrong with it.
        detail: String,
    },
}

fn garbled(detail: impl Into<String>) -> ProcfsError {
    ProcfsError::Parse { path: "text".to_string(), detail: detail.into() }
}

/// The same error, naming the file it came from.
fn in_file(error: ProcfsError, path: &Path) -> ProcfsError {
    match error {
        ProcfsError::Parse { detail, .. } => ProcfsError::Parse { path: path.display().to_string(), detail },
        other => other,
    }
}

/// `AT_CLKTCK` in the ELF auxiliary vector: the frequency of `times()` ticks.
const AT_CLKTCK: usize = 17;

/// The tick rate every Linux architecture has used for decades, used when
/// `/proc/self/auxv` cannot be read.
const DEFAULT_CLOCK_TICKS: u64 = 100;

/// CPU time a process has consumed, user and system, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTicks {
    /// Time in user mode (`utime`), all threads.
    pub user: u64,
    /// Time in kernel mode (`stime`), all threads.
    pub system: u64,
}

impl CpuTicks {
    /// User plus system ticks.
    pub fn total(&self) -> u64 {
        self.user + self.system
    }
}

/// Parses the text of `/proc/<pid>/stat` into its CPU ticks.
///
/// The second field (the command name) is in parentheses and may itself
/// contain spaces and parentheses, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Result<CpuTicks, ProcfsError> {
    let close = text.rfind(')').ok_or_else(|| garbled("no ')' closing the command name"))?;
    // After the name come fields 3 (state), 4 (ppid), ...; utime is field 14
    // and stime field 15, that is indexes 11 and 12 of the rest.
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    if fields.len() < 13 {
        return Err(garbled(format!("only {} fields after the command name", fields.len())));
    }
    let user = fields[11].parse().map_err(|_| garbled(format!("utime {:?} is not a number", fields[11])))?;
    let system = fields[12].parse().map_err(|_| garbled(format!("stime {:?} is not a number", fields[12])))?;
    Ok(CpuTicks { user, system })
}

/// Parses the `VmRSS` line of `/proc/<pid>/status`, in bytes.
pub fn parse_vm_rss(text: &str) -> Result<u64, ProcfsError> {
    parse_kib_line(text, "VmRSS:")
}

/// Parses the `VmHWM` line (peak resident set) of `/proc/<pid>/status`, in bytes.
pub fn parse_vm_hwm(text: &str) -> Result<u64, ProcfsError> {
    parse_kib_line(text, "VmHWM:")
}

/// Parses the `MemAvailable` line of `/proc/meminfo`, in bytes.
pub fn parse_mem_available(text: &str) -> Result<u64, ProcfsError> {
    parse_kib_line(text, "MemAvailable:")
}

/// The value of the line starting with `field` (`VmRSS:`), given in kB, in bytes.
fn parse_kib_line(text: &str, field: &str) -> Result<u64, ProcfsError> {
    let name = field.trim_end_matches(':');
    let line = text.lines().find(|line| line.starts_with(field)).ok_or_else(|| garbled(format!("no {name} line")))?;
    let mut words = line[field.len()..].split_whitespace();
    let value: u64 = words
        .next()
        .ok_or_else(|| garbled(format!("{name} has no value")))?
        .parse()
        .map_err(|_| garbled(format!("{name} is not a number")))?;
    match words.next() {
        Some("kB") | None => Ok(value * 1024),
        Some(unit) => Err(garbled(format!("unexpected {name} unit {unit:?}"))),
    }
}

/// Finds `AT_CLKTCK` in the bytes of `/proc/self/auxv`: native-endian pairs
/// of machine words (type, value), ended by type 0.
pub fn parse_auxv_clock_ticks(bytes: &[u8]) -> Option<u64> {
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |chunk: &[u8]| -> Option<usize> { Some(usize::from_ne_bytes(chunk.try_into().ok()?)) };
    for pair in bytes.chunks_exact(2 * WORD) {
        let key = word(&pair[..WORD])?;
        let value = word(&pair[WORD..])?;
        match key {
            0 => return None,
            AT_CLKTCK if value > 0 => return Some(value as u64),
            _ => {}
        }
    }
    None
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), read from the auxiliary
/// vector; 100 when it cannot be read.
pub fn clock_ticks_per_second() -> u64 {
    std::fs::read("/proc/self/auxv")
        .ok()
        .and_then(|bytes| parse_auxv_clock_ticks(&bytes))
        .unwrap_or(DEFAULT_CLOCK_TICKS)
}

/// CPU ticks consumed so far by process `pid`.
pub fn cpu_ticks(pid: u32) -> Result<CpuTicks, ProcfsError> {
    read_cpu_ticks(&Path::new("/proc").join(pid.to_string()).join("stat"))
}

/// CPU ticks consumed so far by this process.
pub fn own_cpu_ticks() -> Result<CpuTicks, ProcfsError> {
    read_cpu_ticks(Path::new("/proc/self/stat"))
}

fn read(path: &Path) -> Result<String, ProcfsError> {
    std::fs::read_to_string(path).map_err(|source| ProcfsError::Read { path: path.display().to_string(), source })
}

fn read_cpu_ticks(path: &Path) -> Result<CpuTicks, ProcfsError> {
    parse_stat(&read(path)?).map_err(|error| in_file(error, path))
}

/// Resident memory of process `pid`, in bytes.
pub fn resident_bytes(pid: u32) -> Result<u64, ProcfsError> {
    read_status(pid, parse_vm_rss)
}

/// Peak resident memory of process `pid` over its life, in bytes.
pub fn peak_resident_bytes(pid: u32) -> Result<u64, ProcfsError> {
    read_status(pid, parse_vm_hwm)
}

fn read_status(pid: u32, parse: fn(&str) -> Result<u64, ProcfsError>) -> Result<u64, ProcfsError> {
    read_proc_file(pid, "status", parse)
}

/// Parses `/proc/<pid>/<name>` with `parse`, naming the file in an error.
fn read_proc_file<T>(pid: u32, name: &str, parse: fn(&str) -> Result<T, ProcfsError>) -> Result<T, ProcfsError> {
    let path = Path::new("/proc").join(pid.to_string()).join(name);
    parse(&read(&path)?).map_err(|error| in_file(error, &path))
}

/// The number after `field` (such as `syscr:`) on the line starting with it.
fn number_after(text: &str, field: &str) -> Result<u64, ProcfsError> {
    let name = field.trim_end_matches(':');
    let line = text.lines().find(|line| line.starts_with(field)).ok_or_else(|| garbled(format!("no {name} line")))?;
    line[field.len()..].trim().parse().map_err(|_| garbled(format!("{name} is not a number")))
}

/// I/O counters of a process (`/proc/<pid>/io`): every thread, including
/// threads that have exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoCounters {
    /// Bytes passed to read-family calls (files and sockets alike).
    pub rchar: u64,
    /// Bytes passed to write-family calls (files and sockets alike).
    pub wchar: u64,
    /// Read-family system calls (`read`, `readv`, `recvmsg`, ...).
    pub syscr: u64,
    /// Write-family system calls (`write`, `writev`, `sendmsg`, ...).
    pub syscw: u64,
    /// Bytes of page cache the process dirtied (the kernel calls them bytes
    /// "sent to the storage layer"; with large folios a small write into a
    /// clean folio counts the whole folio).
    pub write_bytes: u64,
}

/// Parses the text of `/proc/<pid>/io`.
pub fn parse_io(text: &str) -> Result<IoCounters, ProcfsError> {
    Ok(IoCounters {
        rchar: number_after(text, "rchar:")?,
        wchar: number_after(text, "wchar:")?,
        syscr: number_after(text, "syscr:")?,
        syscw: number_after(text, "syscw:")?,
        write_bytes: number_after(text, "write_bytes:")?,
    })
}

/// I/O counters of process `pid`.
pub fn io_counters(pid: u32) -> Result<IoCounters, ProcfsError> {
    read_proc_file(pid, "io", parse_io)
}

/// Context switches of a set of threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContextSwitches {
    /// The thread gave up the CPU itself (it blocked: a wait, a sleep, I/O).
    pub voluntary: u64,
    /// The scheduler took the CPU away (preempted).
    pub involuntary: u64,
    /// Threads counted.
    pub threads: u64,
}

/// Parses the `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches`
/// lines of one thread's `status`.
pub fn parse_context_switches(text: &str) -> Result<ContextSwitches, ProcfsError> {
    Ok(ContextSwitches {
        voluntary: number_after(text, "voluntary_ctxt_switches:")?,
        involuntary: number_after(text, "nonvoluntary_ctxt_switches:")?,
        threads: 1,
    })
}

/// Context switches of process `pid`, summed over its live threads
/// (`/proc/<pid>/status` has the main thread's only). A thread that exits
/// between two readings takes its switches with it: a difference undercounts
/// by what such threads did.
pub fn context_switches(pid: u32) -> Result<ContextSwitches, ProcfsError> {
    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
    let entries =
        std::fs::read_dir(&tasks).map_err(|source| ProcfsError::Read { path: tasks.display().to_string(), source })?;
    let mut total = ContextSwitches::default();
    for entry in entries.flatten() {
        let path = entry.path().join("status");
        // A thread that exited since the directory was listed is skipped.
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let thread = parse_context_switches(&text).map_err(|error| in_file(error, &path))?;
        total.voluntary += thread.voluntary;
        total.involuntary += thread.involuntary;
        total.threads += 1;
    }
    if total.threads == 0 {
        return Err(ProcfsError::Parse { path: tasks.display().to_string(), detail: "no live thread".to_string() });
    }
    Ok(total)
}

/// The machine's load averages over 1, 5 and 15 minutes (`/proc/loadavg`).
pub fn load_average() -> Result<[f64; 3], ProcfsError> {
    let path = Path::new("/proc/loadavg");
    parse_loadavg(&read(path)?).map_err(|error| in_file(error, path))
}

/// Parses the first three fields of `/proc/loadavg`.
pub fn parse_loadavg(text: &str) -> Result<[f64; 3], ProcfsError> {
    let mut fields = text.split_whitespace().map(str::parse::<f64>);
    let mut next = || fields.next().and_then(Result::ok).ok_or_else(|| garbled("fewer than three load averages"));
    Ok([next()?, next()?, next()?])
}

/// Memory the machine can still give without swapping (`MemAvailable`), in bytes.
pub fn mem_available_bytes() -> Result<u64, ProcfsError> {
    let path = Path::new("/proc/meminfo");
    parse_mem_available(&read(path)?).map_err(|error| in_file(error, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (gavel) S 1 4242 4242 0 -1 4194560 12950 0 0 0 731 129 0 0 20 0 9 0 \
                        123456 1234567890 4321 18446744073709551615 1 1 0 0 0 0 0 4096 17926 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn stat_fields_fourteen_and_fifteen_are_utime_and_stime() {
        assert_eq!(parse_stat(STAT).expect("parses"), CpuTicks { user: 731, system: 129 });
        assert_eq!(parse_stat(STAT).expect("parses").total(), 860);
    }

    #[test]
    fn stat_command_names_with_spaces_and_parentheses() {
        let text = STAT.replace("(gavel)", "(tokio (worker) 1)");
        assert_eq!(parse_stat(&text).expect("parses"), CpuTicks { user: 731, system: 129 });
    }

    #[test]
    fn stat_refuses_truncated_or_garbled_text() {
        assert!(parse_stat("4242 (gavel) S 1 2 3").is_err());
        assert!(parse_stat("4242 gavel S").is_err());
        assert!(parse_stat(&STAT.replace(" 731 ", " x ")).is_err());
    }

    #[test]
    fn vm_rss_in_bytes() {
        let status = "Name:\tgavel\nVmPeak:\t  900000 kB\nVmRSS:\t   51234 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss(status).expect("parses"), 51234 * 1024);
        assert!(parse_vm_rss("Name:\tkthreadd\n").is_err());
        assert!(parse_vm_rss("VmRSS:\t12 MB\n").is_err());
        assert_eq!(parse_vm_hwm(status).map_err(|error| error.to_string()), Err("parsing text: no VmHWM line".into()));
        assert_eq!(parse_vm_hwm("VmHWM:\t  70000 kB\nVmRSS:\t 1 kB\n").expect("parses"), 70000 * 1024);
        let meminfo = "MemTotal:       24683660 kB\nMemFree:         4873272 kB\nMemAvailable:   22484040 kB\n";
        assert_eq!(parse_mem_available(meminfo).expect("parses"), 22484040 * 1024);
        assert!(parse_mem_available("MemTotal: 1 kB\n").is_err());
        assert_eq!(parse_loadavg("1.23 1.93 2.32 1/210 31000\n").expect("parses"), [1.23, 1.93, 2.32]);
        assert!(parse_loadavg("1.23 x").is_err());
    }

    #[test]
    fn io_counters_and_context_switches() {
        let io = "rchar: 6976\nwchar: 120\nsyscr: 10\nsyscw: 3\nread_bytes: 0\nwrite_bytes: 4096\n\
                  cancelled_write_bytes: 0\n";
        let expected = IoCounters { rchar: 6976, wchar: 120, syscr: 10, syscw: 3, write_bytes: 4096 };
        assert_eq!(parse_io(io).expect("parses"), expected);
        assert!(parse_io("rchar: 1\nwchar: 2\n").is_err(), "a missing line is an error");
        assert!(parse_io(&io.replace("syscw: 3", "syscw: x")).is_err());
        let status = "Name:\tgavel\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t7\n";
        let expected = ContextSwitches { voluntary: 150, involuntary: 7, threads: 1 };
        assert_eq!(parse_context_switches(status).expect("parses"), expected);
        assert!(parse_context_switches("voluntary_ctxt_switches:\t150\n").is_err());
        // This process: a sleep is a voluntary switch, and the sum covers every thread.
        let before = context_switches(std::process::id()).expect("own tasks");
        std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(5))).join().expect("joins");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let after = context_switches(std::process::id()).expect("own tasks");
        assert!(after.voluntary > before.voluntary, "{before:?} -> {after:?}");
        assert!(after.threads >= 1);
        let own = io_counters(std::process::id()).expect("own io");
        assert!(own.syscr > 0 && own.rchar > 0, "{own:?}");
    }

    #[test]
    fn auxv_clock_ticks() {
        let mut bytes = Vec::new();
        for (key, value) in [(6usize, 4096usize), (17, 250), (0, 0)] {
            bytes.extend_from_slice(&key.to_ne_bytes());
            bytes.extend_from_slice(&value.to_ne_bytes());
        }
        assert_eq!(parse_auxv_clock_ticks(&bytes), Some(250));
        // Stops at the terminating entry.
        let terminated_early: Vec<u8> = bytes[2 * std::mem::size_of::<usize>()..].to_vec();
        let mut ended = vec![0u8; 2 * std::mem::size_of::<usize>()];
        ended.extend_from_slice(&terminated_early);
        assert_eq!(parse_auxv_clock_ticks(&ended), None);
        assert_eq!(parse_auxv_clock_ticks(&[]), None);
    }

    #[test]
    fn this_process_is_readable() {
        assert!(clock_ticks_per_second() > 0);
        let before = own_cpu_ticks().expect("own stat");
        let mut spin = 0u64;
        for index in 0..2_000_000u64 {
            spin = spin.wrapping_add(index * index);
        }
        std::hint::black_box(spin);
        assert!(own_cpu_ticks().expect("own stat").total() >= before.total());
        assert!(resident_bytes(std::process::id()).expect("own status") > 0);
        assert!(peak_resident_bytes(std::process::id()).expect("own status") > 0);
        assert!(mem_available_bytes().expect("meminfo") > 0);
        assert!(load_average().expect("loadavg")[0] >= 0.0);
        assert!(cpu_ticks(std::process::id()).is_ok());
    }
}
