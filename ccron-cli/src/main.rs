//! The `ccron` binary: parses the command line, reads the process's clock and entropy, runs
//! the command (`ccron_cli::run`), prints its output, and exits with the error's code.

use std::io::Read;

use clap::Parser;

fn entropy() -> std::io::Result<[u8; 32]> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

fn main() {
    let cli = ccron_cli::Cli::parse();
    // The process boundary: the clock gives the default request number.
    #[allow(clippy::disallowed_methods)]
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let needs_entropy = matches!(
        cli.command,
        ccron_cli::Command::Key(ccron_cli::Key::New { .. })
    );
    let entropy = match if needs_entropy {
        entropy()
    } else {
        Ok([0; 32])
    } {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ccron: no entropy source: {e}");
            std::process::exit(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ccron: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(ccron_cli::run(cli, ccron_cli::Env { now_ms, entropy })) {
        Ok(out) => {
            print!("{out}");
            if !out.ends_with('\n') {
                println!();
            }
        }
        Err(e) => {
            eprintln!("ccron: {e}");
            std::process::exit(e.exit_code());
        }
    }
}
