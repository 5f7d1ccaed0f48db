//! The confinement rules, with an in-memory record of root claims.

use std::{collections::HashMap, sync::Mutex};

use async_trait::async_trait;

use super::*;
use crate::directory::{ApiKeyRecord, Org};

/// Root claims in memory (the stores' own are tested in the contract tests).
#[derive(Default)]
struct Claims(Mutex<HashMap<String, String>>);

#[async_trait]
impl Directory for Claims {
    async fn create_org(&self, _: &Org) -> Result<(), Error> {
        unimplemented!()
    }
    async fn org(&self, _: &str) -> Result<Option<Org>, Error> {
        unimplemented!()
    }
    async fn add_api_key(&self, _: &ApiKeyRecord) -> Result<(), Error> {
        unimplemented!()
    }
    async fn api_key(&self, _: &str) -> Result<Option<ApiKeyRecord>, Error> {
        unimplemented!()
    }
    async fn remove_api_key(&self, _: &str) -> Result<Option<ApiKeyRecord>, Error> {
        unimplemented!()
    }
    async fn claim_root(&self, root: &str, org: &str) -> Result<String, Error> {
        let mut claims = self.0.lock().unwrap();
        Ok(claims.entry(root.to_owned()).or_insert_with(|| org.to_owned()).clone())
    }
    async fn root_owner(&self, root: &str) -> Result<Option<String>, Error> {
        Ok(self.0.lock().unwrap().get(root).cloned())
    }
}

/// Roots over an in-memory record of claims.
pub(crate) fn roots(roots: &[PathBuf], forbidden: &[PathBuf]) -> WorkspaceRoots {
    WorkspaceRoots::new(roots, forbidden, Arc::new(Claims::default()))
}

fn refusal(result: Result<PathBuf, Error>) -> String {
    match result {
        Err(Error::Invalid { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The one answer for a path outside what the organization may use.
fn is_outside(reason: &str, dir: &str) -> bool {
    reason
        == format!(
            "`{dir}` is not a folder this organization may use; pick one under the workspace roots your operator set up for it"
        )
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[tokio::test]
async fn without_roots_no_directory_is_accepted() {
    let reason = refusal(WorkspaceRoots::none().confine("acme", "/tmp").await);
    assert!(reason.contains("SPOOL_WORKSPACE_ROOTS"), "{reason}");
}

#[tokio::test]
async fn only_existing_directories_under_a_root_are_accepted() {
    // GIVEN a root with a project in it, and a data directory beside it
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("projects");
    std::fs::create_dir_all(root.join("app")).unwrap();
    std::fs::write(root.join("file"), "x").unwrap();
    let data = base.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let roots = roots(std::slice::from_ref(&root), std::slice::from_ref(&data));
    // THEN a folder under the root is accepted, resolved
    let app = root.join("app");
    assert_eq!(
        roots.confine("acme", s(&app)).await.unwrap(),
        app.canonicalize().unwrap()
    );
    // AND what lies inside the root is refused saying why
    assert!(refusal(roots.confine("acme", "relative/dir").await).contains("not an absolute path"));
    let missing = root.join("missing");
    assert!(refusal(roots.confine("acme", s(&missing)).await).contains("does not exist"));
    assert!(refusal(roots.confine("acme", s(&root.join("file"))).await).contains("not a directory"));
    // AND everything outside gets one answer, naming only the path sent
    let escape = format!("{}/app/../../data", root.display());
    for dir in ["/", "/etc/passwd", "/etc/passwd-nope", escape.as_str(), s(&data)] {
        let reason = refusal(roots.confine("acme", dir).await);
        assert!(is_outside(&reason, dir), "{dir}: {reason}");
        assert!(
            !reason.contains(s(base.path())) || dir.contains(s(base.path())),
            "{reason}"
        );
    }
}

#[tokio::test]
async fn links_are_resolved_before_the_check_and_never_echoed() {
    // GIVEN a link inside the root that points out of it
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
    let roots = roots(std::slice::from_ref(&root), &[]);
    // THEN it is refused like any folder outside, without saying where it leads
    let link = root.join("escape");
    let reason = refusal(roots.confine("acme", s(&link)).await);
    assert!(is_outside(&reason, s(&link)), "{reason}");
    assert!(!reason.contains("`/etc`"), "{reason}");
}

#[tokio::test]
async fn spools_own_folders_are_never_a_working_directory() {
    // GIVEN an operator who made the parent of the data and CLI folders a root
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("spool-data");
    let cli = base.path().join("cli-work");
    std::fs::create_dir_all(data.join("cli")).unwrap();
    std::fs::create_dir_all(cli.join("acme")).unwrap();
    let roots = roots(&[base.path().to_path_buf()], &[data.clone(), cli.clone()]);
    // THEN neither folder, nor a folder in them, nor the folder holding them is one
    for dir in [
        &data,
        &data.join("cli"),
        &cli,
        &cli.join("acme"),
        &base.path().to_path_buf(),
    ] {
        let reason = refusal(roots.confine("acme", s(dir)).await);
        assert!(is_outside(&reason, s(dir)), "{reason}");
    }
}

#[tokio::test]
async fn a_shared_root_belongs_to_the_first_organization_that_uses_it() {
    // GIVEN one shared root with two projects
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("shared");
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::create_dir_all(root.join("b")).unwrap();
    let roots = roots(std::slice::from_ref(&root), &[]);
    // WHEN organization A uses a folder under it
    roots.confine("org-a", s(&root.join("a"))).await.unwrap();
    // THEN B may use nothing under it: not A's folder, not another, not the root
    for dir in [root.join("a"), root.join("b"), root.clone()] {
        let reason = refusal(roots.confine("org-b", s(&dir)).await);
        assert!(is_outside(&reason, s(&dir)), "{reason}");
    }
    // AND A still may, anywhere under it
    roots.confine("org-a", s(&root.join("b"))).await.unwrap();
}

#[tokio::test]
async fn a_process_of_one_organization_uses_a_shared_root_without_claims() {
    // GIVEN a runner's roots: one shared root, its CLI work directory kept out
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("shared");
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::create_dir_all(root.join("work")).unwrap();
    let roots = WorkspaceRoots::for_one_org(std::slice::from_ref(&root), &[root.join("work")]);
    // THEN a folder under it is used with no store of claims
    assert!(roots.confine("org-a", s(&root.join("a"))).await.is_ok());
    // AND the folders kept out and those outside the root are still refused
    for dir in [root.join("work"), base.path().to_path_buf()] {
        let reason = refusal(roots.confine("org-a", s(&dir)).await);
        assert!(is_outside(&reason, s(&dir)), "{reason}");
    }
}

#[tokio::test]
async fn an_org_root_is_each_organizations_own() {
    // GIVEN `{org}` roots with folders of A and of B
    let base = tempfile::tempdir().unwrap();
    let template = base.path().join("repos").join(ORG_PLACEHOLDER);
    let a = base.path().join("repos/org-a/app");
    let b = base.path().join("repos/org-b/app");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let roots = roots(std::slice::from_ref(&template), &[]);
    // THEN each uses its own, and neither the other's (even through `..`)
    assert!(roots.confine("org-a", s(&a)).await.is_ok());
    assert!(roots.confine("org-b", s(&b)).await.is_ok());
    let sneaky = format!("{}/repos/org-a/../org-b/app", base.path().display());
    for (org, dir) in [("org-b", s(&a)), ("org-a", s(&b)), ("org-a", sneaky.as_str())] {
        let reason = refusal(roots.confine(org, dir).await);
        assert!(is_outside(&reason, dir), "{org} {dir}: {reason}");
    }
    // AND an organization whose id cannot name a folder gets none
    let dotdot = format!("{}/repos/../repos/org-a/app", base.path().display());
    assert!(is_outside(&refusal(roots.confine("..", &dotdot).await), &dotdot));
}

#[test]
fn roots_are_absolute_with_one_whole_org_part_and_never_nest() {
    let ok = |r: &[&str]| check_roots(&r.iter().map(PathBuf::from).collect::<Vec<_>>());
    assert!(ok(&["/srv/a", "/srv/b", "/repos/{org}", "/home/{org}/code"]).is_ok());
    for bad in [
        &["srv/a"][..],
        &["/srv/x{org}"],
        &["/srv/{org}/{org}"],
        &["/srv", "/srv/a"],
        &["/srv/a", "/srv"],
        &["/srv/{org}", "/srv/shared"],
        &["/srv/{org}/a", "/srv/{org}/b"],
    ] {
        assert!(ok(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn path_segments_are_checked() {
    for bad in ["", ".", "..", "a/b", "a\\b", "a\nb"] {
        assert!(!is_safe_segment(bad), "{bad:?}");
    }
    assert!(is_safe_segment("ses_0193") && is_safe_segment("global"));
}

#[tokio::test]
async fn the_roots_an_organization_may_use_are_listed_without_anothers() {
    // GIVEN no roots: nothing is listed
    assert!(WorkspaceRoots::none().allowed("acme").await.unwrap().is_empty());
    // GIVEN a per-organization root and a shared one
    let base = tempfile::tempdir().unwrap();
    let shared = base.path().join("shared");
    std::fs::create_dir_all(shared.join("project")).unwrap();
    let own = base.path().join("orgs/{org}");
    let r = roots(&[own, shared.clone()], &[]);
    // THEN each organization sees its own root and the unclaimed shared one
    let acme_own = base.path().join("orgs/acme");
    assert_eq!(r.allowed("acme").await.unwrap(), [s(&acme_own), s(&shared)]);
    // WHEN one organization claims the shared root, THEN only it still lists it
    r.confine("acme", s(&shared.join("project"))).await.unwrap();
    assert_eq!(r.allowed("acme").await.unwrap().len(), 2);
    let globex = r.allowed("globex").await.unwrap();
    assert_eq!(globex, [s(&base.path().join("orgs/globex"))]);
    // An id that cannot name a folder is offered none.
    assert!(r.allowed("../x").await.unwrap().is_empty());
}
