//! Background threads start on the configured cores (one test: the choice
//! is process-wide, so its steps must not run in parallel).

use engram_pmem::background::{self, BackgroundCpus, PlacementError};

fn cores_of_a_background_thread() -> Vec<usize> {
    background::spawn("engram-test-bg", || background::this_thread_cpus().unwrap())
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn background_threads_start_where_configured() {
    let allowed = background::this_thread_cpus().unwrap();
    assert!(!allowed.is_empty());

    // The default is auto: the last quarter of this process's cores.
    let auto = background::resolve(&BackgroundCpus::Auto, &allowed).unwrap();
    assert_eq!(background::placement(), auto);
    assert_eq!(
        cores_of_a_background_thread(),
        auto.clone().unwrap_or(allowed.clone())
    );

    // One named core.
    let first = allowed[0];
    assert_eq!(
        background::configure(&BackgroundCpus::List(vec![first])),
        Ok(Some(vec![first]))
    );
    assert_eq!(cores_of_a_background_thread(), vec![first]);
    // The caller's own cores are untouched.
    assert_eq!(background::this_thread_cpus().unwrap(), allowed);

    // A core the process may not use is refused, and the choice stands.
    let outside = allowed.last().unwrap() + 1;
    assert!(matches!(
        background::configure(&BackgroundCpus::List(vec![outside])),
        Err(PlacementError::NotAllowed { cpu, .. }) if cpu == outside
    ));
    assert_eq!(background::placement(), Some(vec![first]));

    // All: no placement.
    assert_eq!(background::configure(&BackgroundCpus::All), Ok(None));
    assert_eq!(cores_of_a_background_thread(), allowed);
}
