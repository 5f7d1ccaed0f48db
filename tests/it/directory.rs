//! The directory of organizations and API keys, one contract for both backends.

use spool_chat::directory::{ApiKeyRecord, Directory, Org};
use spool_log::error::Error;
use spool_tests::{Harness, unique_id};

fn org(id: &str) -> Org {
    Org {
        id: id.to_owned(),
        name: format!("Org {id}"),
        created_ms: 1_700_000_000_000,
    }
}

fn key(key_id: &str, org_id: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        key_id: key_id.to_owned(),
        org_id: org_id.to_owned(),
        secret_hash: "ab".repeat(32),
        capabilities: vec!["agent".to_owned(), "context_for_query".to_owned()],
        created_ms: 1_700_000_000_123,
    }
}

/// Organizations are created once and read back by any instance.
pub(crate) async fn organizations_are_created_once<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let id = unique_id("org");
    // GIVEN no organization with this id
    assert_eq!(a.org(&id).await.unwrap(), None);
    // WHEN one instance creates it
    a.create_org(&org(&id)).await.unwrap();
    // THEN another instance reads it back whole
    assert_eq!(b.org(&id).await.unwrap(), Some(org(&id)));
    // AND creating it again, from either, is refused and changes nothing
    let mut again = org(&id);
    again.name = "Someone else".to_owned();
    assert!(matches!(b.create_org(&again).await, Err(Error::Exists { .. })));
    assert_eq!(a.org(&id).await.unwrap(), Some(org(&id)));
}

/// An API key belongs to an existing organization, and its id is unique.
pub(crate) async fn api_keys_need_their_organization<H: Harness>(harness: &H) {
    let (a, b) = (harness.metadata().await, harness.metadata().await);
    let (org_id, key_id) = (unique_id("org"), unique_id("key"));
    // GIVEN no organization: a key for it is refused and not stored
    assert!(matches!(
        a.add_api_key(&key(&key_id, &org_id)).await,
        Err(Error::Missing { .. })
    ));
    assert_eq!(b.api_key(&key_id).await.unwrap(), None);
    // WHEN the organization exists
    a.create_org(&org(&org_id)).await.unwrap();
    a.add_api_key(&key(&key_id, &org_id)).await.unwrap();
    // THEN the key reads back whole from another instance
    assert_eq!(b.api_key(&key_id).await.unwrap(), Some(key(&key_id, &org_id)));
    // AND its id cannot be taken again, even by another organization
    let other_org = unique_id("org");
    b.create_org(&org(&other_org)).await.unwrap();
    let mut thief = key(&key_id, &other_org);
    thief.secret_hash = "cd".repeat(32);
    assert!(matches!(b.add_api_key(&thief).await, Err(Error::Exists { .. })));
    assert_eq!(a.api_key(&key_id).await.unwrap(), Some(key(&key_id, &org_id)));
    // AND a key with no capabilities reads back with none
    let bare_id = unique_id("key");
    let mut bare = key(&bare_id, &org_id);
    bare.capabilities.clear();
    a.add_api_key(&bare).await.unwrap();
    assert_eq!(b.api_key(&bare_id).await.unwrap(), Some(bare));
}

/// A shared workspace root has one owner: of many organizations claiming it at once, through
/// several instances, one wins and every claimant is told the same owner; a long path is a key
/// like any other, and each root is claimed on its own.
pub(crate) async fn a_root_is_claimed_once<H: Harness>(harness: &H) {
    let root = format!("/srv/{}/{}", unique_id("root"), "deep/".repeat(500));
    let mut claims = Vec::new();
    for i in 0..20 {
        let metadata = harness.metadata().await;
        let root = root.clone();
        claims.push(tokio::spawn(async move {
            metadata.claim_root(&root, &format!("org-{i}")).await.unwrap()
        }));
    }
    let mut owners = Vec::new();
    for claim in claims {
        owners.push(claim.await.unwrap());
    }
    owners.dedup();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert!(owners[0].starts_with("org-"), "{owners:?}");
    let metadata = harness.metadata().await;
    assert_eq!(metadata.claim_root(&root, "latecomer").await.unwrap(), owners[0]);
    let other = format!("/srv/{}", unique_id("root"));
    assert_eq!(metadata.claim_root(&other, "latecomer").await.unwrap(), "latecomer");
}

on_both_backends!(directory:
    a_root_is_claimed_once,
    organizations_are_created_once,
    api_keys_need_their_organization,
);
