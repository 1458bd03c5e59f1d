//! Placeholder main job until the cron tables land: prints a tick.

fn main() {
    let tick = ccron::Tick::new(1, 1, Some(0));
    println!("{tick:?}");
}
