//! Checks one image and prints the report (text, or JSON with `--json`);
//! exits with the report's code. For manual runs and the benchmark.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let Some(path) = args.iter().find(|a| !a.starts_with("--")) else {
        eprintln!("usage: check [--json] IMAGE");
        std::process::exit(8);
    };
    let opts = stitch_fsck::CheckOptions::default();
    match stitch_fsck::check(path.as_ref(), &opts, &mut |_, _, _| {}) {
        Ok(r) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            } else {
                print!("{r}");
            }
            std::process::exit(r.exit_code());
        }
        Err(e) => {
            eprintln!("fsck: {e}");
            std::process::exit(e.exit_code());
        }
    }
}
