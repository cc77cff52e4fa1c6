use std::time::Duration;

use super::*;

const SVC: &str = "kind: Service\nmetadata: {name: a, namespace: x}\nspec: {ports: [{port: 80}]}\n";

fn names(l: &Loaded) -> Vec<String> {
    l.objects.services.iter().map(|s| s.metadata.name.clone()).collect()
}

#[test]
fn bundled_example_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let l = load(&dir).unwrap();
    assert!(l.errors.is_empty(), "{:?}", l.errors);
    assert!(l.objects.services.len() >= 5);
    assert_eq!(l.objects.services.len(), l.objects.endpoint_slices.len());
    assert!(!l.objects.pods.is_empty() && l.objects.nodes.len() == 3);
    let reviews = l.objects.endpoint_slices.iter().find(|s| s.service_name() == Some("reviews")).unwrap();
    assert!(reviews.endpoints.iter().any(|e| e.conditions.terminating == Some(true)));
}

#[test]
fn bad_documents_are_located_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        "kind: Service\nmetadata: {name: ok}\n---\nkind: Service\nspec: {ports: [{port: notanumber}]}\n---\n# empty\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("b.yml"), "kind: [unclosed\n").unwrap();
    std::fs::write(dir.path().join("ignored.txt"), "kind: Service").unwrap();
    let l = load(dir.path()).unwrap();
    assert_eq!(names(&l), vec!["ok"]);
    assert_eq!(l.errors.len(), 2, "{:?}", l.errors);
    let e = l.errors[0].to_string();
    assert!(e.contains("a.yaml: document 1:") && e.contains("expected u16"), "{e}");
    assert!(l.errors[1].to_string().contains("b.yml: document 0:"));
    assert!(load(&dir.path().join("missing")).is_err());
}

#[test]
fn edit_rename_delete() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = ConfigDir::new(dir.path());
    std::fs::write(dir.path().join("s.yaml"), SVC).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["a"]);
    // Edit: the new content wins.
    std::fs::write(dir.path().join("s.yaml"), SVC.replace("name: a", "name: b")).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["b"]);
    // Rename: same object, new file.
    std::fs::rename(dir.path().join("s.yaml"), dir.path().join("t.yml")).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["b"]);
    // Delete.
    std::fs::remove_file(dir.path().join("t.yml")).unwrap();
    assert!(names(&src.reload().unwrap()).is_empty());
}

#[test]
fn a_broken_document_keeps_its_last_good_version() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = ConfigDir::new(dir.path());
    let two = format!("{SVC}---\n{}", SVC.replace("name: a", "name: z"));
    std::fs::write(dir.path().join("s.yaml"), &two).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["a", "z"]);
    // An invalid field in document 1: `z` stays as it was, `a` updates.
    let bad = format!(
        "{}---\nkind: Service\nmetadata: {{name: z}}\nspec: {{ports: [{{port: -1}}]}}\n",
        SVC.replace("port: 80", "port: 81")
    );
    std::fs::write(dir.path().join("s.yaml"), bad).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(names(&l), vec!["a", "z"]);
    assert_eq!(l.objects.services[0].spec.ports[0].port, 81);
    assert_eq!(l.objects.services[1].spec.ports[0].port, 80, "last good version of the broken document");
    assert!(l.errors[0].to_string().contains("s.yaml: document 1:"), "{:?}", l.errors);
    // Read again unchanged (by its text's hash, then, once the stamp can
    // be trusted, by its stamp alone): the error is still reported and the
    // last good version still stands.
    for wait in [0, 120, 0] {
        std::thread::sleep(std::time::Duration::from_millis(wait));
        let again = src.reload().unwrap();
        assert_eq!(again.errors, l.errors, "after {wait} ms");
        assert!(again.changed.is_empty(), "after {wait} ms: {:?}", again.changed);
        assert_eq!(again.objects.services[1].spec.ports[0].port, 80);
    }
}

#[test]
fn a_half_written_file_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = ConfigDir::new(dir.path());
    let two = format!("{SVC}---\n{}", SVC.replace("name: a", "name: z"));
    std::fs::write(dir.path().join("s.yaml"), &two).unwrap();
    src.reload().unwrap();
    // An editor wrote half of the file: the second document is cut inside a flow mapping.
    let cut = &two[..two.len() - 20];
    std::fs::write(dir.path().join("s.yaml"), cut).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(names(&l), vec!["a", "z"], "{:?}", l.errors);
    assert_eq!(l.errors.len(), 1);
    // Finished writing: everything is current again.
    std::fs::write(dir.path().join("s.yaml"), &two).unwrap();
    let l = src.reload().unwrap();
    assert!(l.errors.is_empty());
    assert_eq!(names(&l), vec!["a", "z"]);
}

#[test]
fn the_watcher_reports_changes() {
    let dir = tempfile::tempdir().unwrap();
    let src = ConfigDir::new(dir.path());
    let (_w, rx) = src.watch().unwrap();
    std::fs::write(dir.path().join("s.yaml"), SVC).unwrap();
    rx.recv_timeout(Duration::from_secs(5)).expect("an event for the new file");
}

/// The events that come within `wait` of each other.
fn events(rx: &std::sync::mpsc::Receiver<DirEvent>, wait: Duration) -> Vec<DirEvent> {
    std::iter::from_fn(|| rx.recv_timeout(wait).ok()).collect()
}

#[test]
fn the_watcher_tells_files_written_aside_and_renamed_into_place_from_the_rest() {
    use DirEvent::*;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("..2026_12_07")).unwrap();
    std::fs::write(dir.path().join("s.yaml"), SVC).unwrap();
    let src = ConfigDir::new(dir.path());
    let (_w, rx) = src.watch().unwrap();
    let wait = Duration::from_millis(300);
    // Written aside, then renamed into place.
    std::fs::write(dir.path().join("t.yaml.tmp"), SVC).unwrap();
    std::fs::rename(dir.path().join("t.yaml.tmp"), dir.path().join("t.yaml")).unwrap();
    let got = events(&rx, wait);
    let tmp = dir.path().join("t.yaml.tmp");
    assert!(got.iter().all(|e| matches!(e, Aside(p) | AsideMoved(p) if *p == tmp) || *e == Landed), "{got:?}");
    assert!(got.contains(&Aside(tmp.clone())) && got.contains(&AsideMoved(tmp)) && got.contains(&Landed), "{got:?}");
    // Written in place, moved away (an editor's save starts so), removed:
    // steps of several, none whole for sure.
    std::fs::write(dir.path().join("s.yaml"), SVC).unwrap();
    let got = events(&rx, wait);
    assert!(!got.is_empty() && got.iter().all(|e| *e == Other), "written in place: {got:?}");
    std::fs::rename(dir.path().join("s.yaml"), dir.path().join("s.yaml~")).unwrap();
    let got = events(&rx, wait);
    assert!(got.contains(&Other) && !got.contains(&Landed), "moved away: {got:?}");
    std::fs::remove_file(dir.path().join("t.yaml")).unwrap();
    assert_eq!(events(&rx, wait), [Other], "removed");
    // A directory made.
    std::fs::create_dir(dir.path().join("ns")).unwrap();
    assert_eq!(events(&rx, wait), [Other], "a directory made");
    // Renamed to a hidden name, or below a hidden directory: not read by
    // that name, so not landed.
    for to in [dir.path().join(".u.yaml"), dir.path().join("..2026_12_07").join("u.yaml")] {
        std::fs::write(dir.path().join("u.tmp"), SVC).unwrap();
        std::fs::rename(dir.path().join("u.tmp"), &to).unwrap();
        let got = events(&rx, wait);
        assert!(got.contains(&Other) && !got.contains(&Landed), "{}: {got:?}", to.display());
    }
}

#[test]
fn a_relative_directory_is_matched_as_the_watcher_names_it() {
    // The watcher names a relative directory's paths absolute. (A path
    // relative to the working directory that leads to a temporary one:
    // nothing is written into the source tree.)
    let dir = tempfile::tempdir().unwrap();
    let up =
        std::env::current_dir().unwrap().components().filter(|c| matches!(c, std::path::Component::Normal(_))).count();
    let rel: PathBuf =
        std::iter::repeat_n(std::path::Path::new(".."), up).chain([dir.path().strip_prefix("/").unwrap()]).collect();
    assert!(rel.is_relative() && rel.join("..").exists(), "{}", rel.display());
    let src = ConfigDir::new(&rel);
    let (_w, rx) = src.watch().unwrap();
    std::fs::write(rel.join("t.tmp"), SVC).unwrap();
    std::fs::rename(rel.join("t.tmp"), rel.join("t.yaml")).unwrap();
    let got = events(&rx, Duration::from_millis(300));
    assert!(got.contains(&DirEvent::Landed), "{got:?}");
    // A directory with a manifest's name renamed into place is not one.
    std::fs::create_dir(rel.join("d.tmp")).unwrap();
    std::fs::rename(rel.join("d.tmp"), rel.join("d.yaml")).unwrap();
    let got = events(&rx, Duration::from_millis(300));
    assert!(got.contains(&DirEvent::Other) && !got.contains(&DirEvent::Landed), "{got:?}");
}

#[test]
fn istio_config_is_read_and_validated_with_field_paths() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("vs.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r}\nspec:\n  hosts: [r]\n  http:\n  - route:\n    - {destination: {host: r, subset: a}, weight: 60}\n    - {destination: {host: r, subset: b}, weight: 60}\n",
    )
    .unwrap();
    let l = load(dir.path()).unwrap();
    assert!(l.objects.istio.is_empty());
    assert_eq!(l.errors.len(), 1);
    let e = l.errors[0].to_string();
    assert!(e.contains("vs.yaml: document 0: spec.http[0].route: total destination weight 120 != 100"), "{e}");
    let bundled = load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo")).unwrap();
    assert!(bundled.errors.is_empty(), "{:?}", bundled.errors);
    assert!(bundled.objects.istio.len() >= 8);
}

#[test]
fn unknown_kinds_are_errors_known_unread_ones_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa}\n---\napiVersion: v1\nkind: Servise\nmetadata: {name: typo}\n").unwrap();
    let l = load(dir.path()).unwrap();
    assert_eq!(l.skipped, 1);
    assert_eq!(l.errors.len(), 1);
    assert!(l.errors[0].to_string().contains("a.yaml: document 1: unknown kind \"Servise\""), "{}", l.errors[0]);
}

#[test]
fn unchanged_files_are_not_parsed_again_and_changed_ones_always_are() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    std::fs::write(&a, SVC).unwrap();
    std::fs::write(&b, SVC.replace("name: a", "name: b")).unwrap();
    let mut src = ConfigDir::new(dir.path());
    // Written just now: too recent for the stamps to be trusted; the
    // parses are kept with their text's hash.
    assert_eq!(names(&src.reload().unwrap()), vec!["a", "b"]);
    assert!(src.parsed.values().all(|p| !p.trusted));
    // Read again, the same text: the parse stands, nothing changed.
    assert!(src.reload().unwrap().changed.is_empty());
    std::thread::sleep(RACY * 2);
    src.reload().unwrap();
    assert_eq!(src.parsed.values().filter(|p| p.trusted).count(), 2, "stable files are trusted");
    // An in-place edit of the same length, right after: seen.
    std::fs::write(&a, SVC.replace("name: a", "name: c")).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["c", "b"]);
    assert!(!src.parsed[&a].trusted, "too recent to trust");
    // Edited again within the same clock tick, the same length: the
    // untrusted stamp is not believed, the text is compared.
    std::fs::write(&a, SVC.replace("name: a", "name: e")).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["e", "b"]);
    std::fs::write(&a, SVC.replace("name: a", "name: c")).unwrap();
    // Renamed into place: a new inode, seen.
    let tmp = dir.path().join("b.yaml.tmp");
    std::fs::write(&tmp, SVC.replace("name: a", "name: d")).unwrap();
    std::fs::rename(&tmp, &b).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["c", "d"]);
    // Deleted: forgotten.
    std::fs::remove_file(&a).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["d"]);
    assert!(!src.parsed.contains_key(&a));
}

/// What the control thread's endpoint fast path reads: which objects a
/// reload changed, found from the files read anew only.
#[test]
fn a_reload_names_the_objects_that_changed() {
    const SLICE: &str = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
        metadata: {name: a-1, namespace: x, labels: {kubernetes.io/service-name: a}}\n\
        addressType: IPv4\nports: [{port: 80}]\nendpoints: [{addresses: [10.0.0.1]}, {addresses: [10.0.0.2]}]\n";
    let dir = tempfile::tempdir().unwrap();
    let mut src = ConfigDir::new(dir.path());
    std::fs::write(dir.path().join("s.yaml"), SVC).unwrap();
    std::fs::write(dir.path().join("e.yaml"), SLICE).unwrap();
    let kinds =
        |l: &Loaded| l.changed.iter().map(|r| format!("{}/{}/{}", r.kind, r.namespace, r.name)).collect::<Vec<_>>();
    assert_eq!(kinds(&src.reload().unwrap()), ["EndpointSlice/x/a-1", "Service/x/a"], "everything is new");
    assert!(src.reload().unwrap().changed.is_empty(), "files read again but unchanged");
    std::fs::write(dir.path().join("e.yaml"), SLICE.replace(", {addresses: [10.0.0.2]}", "")).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(kinds(&l), ["EndpointSlice/x/a-1"]);
    assert_eq!(l.changed[0].service.as_deref(), Some("a"));
    std::fs::remove_file(dir.path().join("s.yaml")).unwrap();
    assert_eq!(kinds(&src.reload().unwrap()), ["Service/x/a"], "a removed object is a change");
}

// Hostile directories (issue #19, items 3-5). Each of these hung, looped or
// exhausted memory before the walk checked file types, visited directories
// and sizes.

fn mkfifo(path: &Path) {
    assert!(std::process::Command::new("mkfifo").arg(path).status().unwrap().success());
}

#[test]
fn a_fifo_named_like_a_manifest_is_reported_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.yaml"), SVC).unwrap();
    let fifo = dir.path().join("pipe.yaml");
    mkfifo(&fifo);
    // Opening the FIFO for reading would block until a writer came; the
    // reload returns (on a thread, so a regression fails instead of hanging).
    let path = dir.path().to_owned();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(load(&path).map(|l| (names(&l), l.errors))).unwrap());
    let (names, errors) = rx.recv_timeout(Duration::from_secs(10)).expect("reload hung on a FIFO").unwrap();
    assert_eq!(names, vec!["a"]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].to_string().contains("pipe.yaml") && errors[0].message.contains("not a regular file"));
}

#[test]
fn a_link_to_a_device_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.yaml")).unwrap();
    std::fs::write(dir.path().join("s.yaml"), SVC).unwrap();
    let l = load(dir.path()).unwrap();
    assert_eq!(names(&l), vec!["a"]);
    assert!(l.errors.iter().any(|e| e.file.ends_with("zero.yaml") && e.message.contains("not a regular file")));
}

#[test]
fn a_manifest_replaced_by_a_fifo_keeps_its_objects() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = ConfigDir::new(dir.path());
    let file = dir.path().join("s.yaml");
    std::fs::write(&file, SVC).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["a"]);
    std::fs::remove_file(&file).unwrap();
    mkfifo(&file);
    let l = src.reload().unwrap();
    assert_eq!(names(&l), vec!["a"], "last good version kept");
    assert!(l.changed.is_empty(), "{:?}", l.changed);
}

#[test]
fn link_loops_read_each_directory_once() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("ns");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("s.yaml"), SVC).unwrap();
    std::os::unix::fs::symlink(".", dir.path().join("a")).unwrap();
    std::os::unix::fs::symlink(".", dir.path().join("b")).unwrap();
    std::os::unix::fs::symlink("..", sub.join("up")).unwrap();
    // Before: a/b/a/b/... doubled at every level until ELOOP (minutes of
    // CPU and millions of paths); now each directory is read once.
    let (tx, rx) = std::sync::mpsc::channel();
    let path = dir.path().to_owned();
    std::thread::spawn(move || tx.send(load(&path).map(|l| (names(&l), l.errors.len()))).unwrap());
    let (names, errors) = rx.recv_timeout(Duration::from_secs(10)).expect("walk did not end").unwrap();
    assert_eq!(names, vec!["a"], "one object, read once");
    assert_eq!(errors, 0);
}

#[test]
fn configmap_mount_links_are_followed_and_hidden_dirs_not_read_twice() {
    // kubelet's layout: ..<timestamp>/ holds the files, ..data -> it, and
    // each key is a link through ..data.
    let dir = tempfile::tempdir().unwrap();
    let ts = dir.path().join("..2026_12_01_00_00_00.1");
    std::fs::create_dir(&ts).unwrap();
    std::fs::write(ts.join("mesh.yaml"), SVC).unwrap();
    std::os::unix::fs::symlink("..2026_12_01_00_00_00.1", dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/mesh.yaml", dir.path().join("mesh.yaml")).unwrap();
    let mut src = ConfigDir::new(dir.path());
    let l = src.reload().unwrap();
    assert_eq!(names(&l), vec!["a"], "once, through the key's link");
    // An update swaps ..data to a new directory.
    let ts2 = dir.path().join("..2026_12_01_00_01_00.2");
    std::fs::create_dir(&ts2).unwrap();
    std::fs::write(ts2.join("mesh.yaml"), SVC.replace("name: a", "name: b")).unwrap();
    std::os::unix::fs::symlink("..2026_12_01_00_01_00.2", dir.path().join("..data_tmp")).unwrap();
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
    assert_eq!(names(&src.reload().unwrap()), vec!["b"]);
}

#[test]
fn oversized_files_are_refused_with_the_limit_named() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits { max_file_bytes: 1000, max_documents: 10 };
    std::fs::write(dir.path().join("big.yaml"), format!("{SVC}---\n").repeat(20)).unwrap();
    let l = ConfigDir::new(dir.path()).with_limits(limits).reload().unwrap();
    assert!(l.objects.services.is_empty());
    let e = l.errors[0].to_string();
    assert!(
        e.contains("big.yaml") && e.contains("over the limit of 1000") && e.contains("ISTIOD_RS_CONFIG_MAX_FILE_BYTES"),
        "{e}"
    );
}

#[test]
fn documents_past_the_limit_are_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let docs: String = (0..50).map(|i| SVC.replace("name: a", &format!("name: s{i}")) + "---\n").collect();
    std::fs::write(dir.path().join("many.yaml"), docs).unwrap();
    let l =
        ConfigDir::new(dir.path()).with_limits(Limits { max_file_bytes: 1 << 20, max_documents: 10 }).reload().unwrap();
    assert_eq!(l.objects.services.len(), 10);
    assert_eq!(l.errors.len(), 1);
    assert!(l.errors[0].to_string().contains("document 10: more than 10 documents"), "{}", l.errors[0]);
}

#[test]
fn edits_to_kinds_not_read_name_no_object() {
    // A Deployment beside the mesh, and a ConfigMap key that is no CA:
    // editing them changes nothing served, so a reload must not name them
    // (a named unknown kind forces a rebuild). A ConfigMap's CA is read.
    let dir = tempfile::tempdir().unwrap();
    let mut src = ConfigDir::new(dir.path());
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\ndata: {a: b, ca.crt: one}\n";
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: x}\nspec: {replicas: 1}\n";
    std::fs::write(dir.path().join("cm.yaml"), cm).unwrap();
    std::fs::write(dir.path().join("d.yaml"), deploy).unwrap();
    std::fs::write(dir.path().join("s.yaml"), SVC).unwrap();
    src.reload().unwrap();
    std::thread::sleep(Duration::from_millis(60));
    std::fs::write(dir.path().join("cm.yaml"), cm.replace("a: b", "a: c")).unwrap();
    std::fs::write(dir.path().join("d.yaml"), deploy.replace("replicas: 1", "replicas: 2")).unwrap();
    let l = src.reload().unwrap();
    assert!(l.changed.is_empty(), "{:?}", l.changed);
    assert_eq!(l.skipped, 1);
    assert_eq!(l.objects.config_maps[0].data["ca.crt"], "one");
    assert_eq!(l.objects.config_maps[0].data["a"], "", "kept by name only");
    std::thread::sleep(Duration::from_millis(60));
    std::fs::write(dir.path().join("cm.yaml"), cm.replace("one", "two")).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(l.changed.len(), 1, "{:?}", l.changed);
    assert_eq!(l.changed[0].kind, "ConfigMap");
}

/// What a file read a document at a time reports and keeps where its
/// documents move, repeat, or are refused at an index another document
/// came from: the cases a reuse of the objects in force (instead of a
/// copy of each) has to keep as they are.
#[test]
fn moved_repeated_and_refused_documents_keep_what_is_in_force() {
    let svc = |name: &str, port: i32| SVC.replace("name: a", &format!("name: {name}")).replace("80", &port.to_string());
    let bad = |name: &str| {
        format!("kind: Service\nmetadata: {{name: {name}, namespace: x}}\nspec: {{ports: [{{port: -1}}]}}\n")
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.yaml");
    let mut src = ConfigDir::new(dir.path());
    let changed = |l: &Loaded| l.changed.iter().map(|r| r.name.clone()).collect::<std::collections::BTreeSet<_>>();
    // Documents after a removed one move up an index: the removed one is
    // named, none before it is.
    let mut docs: Vec<String> = (0..12).map(|i| svc(&format!("s{i}"), 80)).collect();
    std::fs::write(&path, docs.join("---\n")).unwrap();
    src.reload().unwrap();
    docs.remove(6);
    std::fs::write(&path, docs.join("---\n")).unwrap();
    let l = src.reload().unwrap();
    let named = changed(&l);
    assert!(named.contains("s6"), "{named:?}");
    assert!((0..6).all(|i| !named.contains(&format!("s{i}"))), "{named:?}");
    assert_eq!(l.objects, load(dir.path()).unwrap().objects);
    // One text twice: both read, and both still there after an edit
    // elsewhere (read once, in force twice).
    let docs = [svc("d", 80), svc("d", 80), svc("e", 80)];
    std::fs::write(&path, docs.join("---\n")).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(names(&l), ["d", "d", "e"]);
    std::fs::write(&path, [svc("d", 80), svc("d", 80), svc("e", 81)].join("---\n")).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(names(&l), ["d", "d", "e"]);
    assert_eq!(changed(&l).into_iter().collect::<Vec<_>>(), ["e"]);
    assert_eq!(l.objects, load(dir.path()).unwrap().objects);
    // [A, B] -> [refused, A]: the refused document keeps A, its last good
    // version, and A's text, now second, reads A again; B is gone.
    std::fs::write(&path, [svc("ra", 80), svc("rb", 80)].join("---\n")).unwrap();
    src.reload().unwrap();
    std::fs::write(&path, [bad("ra"), svc("ra", 80)].join("---\n")).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(names(&l), ["ra", "ra"]);
    assert!(l.errors.iter().any(|e| e.to_string().contains("s.yaml: document 0:")), "{:?}", l.errors);
    let named = changed(&l);
    assert!(named.contains("rb") && named.contains("ra"), "{named:?}");
    // Mended: each document reads as a fresh reading does.
    std::fs::write(&path, [svc("ra", 80), svc("rc", 80)].join("---\n")).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(names(&l), ["ra", "rc"]);
    assert_eq!(l.objects, load(dir.path()).unwrap().objects);
}

/// An edit of one document of many parses that one (issue #40: a file of a
/// hundred Pods, one scaled away, re-parsed all of them): the others are
/// taken from what is in force by their text, wherever they moved, and
/// what is read is what a reading of the whole file gives.
#[test]
fn an_edit_parses_only_the_documents_it_changed() {
    let svc = |name: &str, port: i32| SVC.replace("name: a", &format!("name: {name}")).replace("80", &port.to_string());
    let file = |docs: &[String]| docs.join("---\n");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.yaml");
    let mut src = ConfigDir::new(dir.path());
    let ports = |l: &Loaded| {
        l.objects.services.iter().map(|s| format!("{}:{}", s.metadata.name, s.spec.ports[0].port)).collect::<Vec<_>>()
    };
    let mut docs: Vec<String> = (0..20).map(|i| svc(&format!("s{i}"), 80)).collect();
    std::fs::write(&path, file(&docs)).unwrap();
    src.reload().unwrap();
    assert_eq!(src.documents_parsed(), 20);
    // One document changed, one removed from the middle (the rest move).
    docs[3] = svc("s3", 81);
    docs.remove(10);
    std::fs::write(&path, file(&docs)).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(src.documents_parsed(), 21, "only the changed document is parsed");
    let mut want: Vec<String> = (0..20).filter(|i| *i != 10).map(|i| format!("s{i}:80")).collect();
    want[3] = "s3:81".into();
    assert_eq!(ports(&l), want);
    assert!(l.changed.iter().any(|r| r.name == "s3") && l.changed.iter().any(|r| r.name == "s10"));
    // A broken document keeps its last good version and is parsed again
    // on every edit (its error stands); an empty document reads as one.
    docs[5] = "kind: Service\nmetadata: {name: s5, namespace: x}\nspec: {ports: [{port: -1}]}\n".into();
    docs.push(String::new());
    std::fs::write(&path, file(&docs)).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(src.documents_parsed(), 23);
    assert_eq!(ports(&l), want, "s5 keeps its last good version");
    assert!(l.errors[0].to_string().contains("s.yaml: document 5:"), "{:?}", l.errors);
    docs[0] = svc("s0", 82);
    std::fs::write(&path, file(&docs)).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(src.documents_parsed(), 25, "the edited one and the broken one");
    want[0] = "s0:82".into();
    assert_eq!(ports(&l), want);
    assert_eq!(l.errors.len(), 1);
    // What is in force is what a fresh reading of the directory finds
    // (but for the broken document, which a fresh reading has no last
    // good version of).
    docs[5] = svc("s5", 80);
    std::fs::write(&path, file(&docs)).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(l.objects, load(dir.path()).unwrap().objects);
    // A file that reads only whole (a syntax error) is read whole, and
    // read a document at a time again once mended.
    std::fs::write(&path, format!("{}---\nkind: [\n", file(&docs))).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(ports(&l).len(), 19, "nothing lost: {:?}", l.errors);
    let before = src.documents_parsed();
    std::fs::write(&path, file(&docs)).unwrap();
    let l = src.reload().unwrap();
    assert_eq!(src.documents_parsed() - before, 20, "no documents known from a file read whole");
    assert_eq!(l.objects, load(dir.path()).unwrap().objects);
}
