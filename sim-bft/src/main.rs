//! The `sim-bft` command line.

fn main() {
    println!("sim-bft: under construction");
}
