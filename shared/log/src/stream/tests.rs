//! Tests of paths, content types, offsets and expiry.

use super::*;

#[test]
fn an_organizations_streams_live_in_its_namespace() {
    let path = StreamPath::in_org("acme", "events/a").unwrap();
    assert_eq!(path.as_str(), "o/acme/events/a");
    assert_eq!(path.org_and_rel(), Some(("acme", "events/a")));
    assert_eq!(StreamPath::parse("audit").unwrap().org_and_rel(), None);
    assert!(StreamPath::in_org("acme", "../x").is_err());
}

#[test]
fn offsets_print_sortably_and_parse_back() {
    // GIVEN offsets around digit-count boundaries
    let offsets = [0, 9, 10, 99, 12_345, Offset::MAX_SEQ].map(Offset::after);
    // WHEN they are printed
    let printed: Vec<String> = offsets.iter().map(ToString::to_string).collect();
    // THEN string order is stream order and each parses back
    let mut sorted = printed.clone();
    sorted.sort();
    assert_eq!(sorted, printed);
    for (o, s) in offsets.iter().zip(&printed) {
        assert_eq!(s.parse::<Offset>().unwrap(), *o);
    }
    assert_eq!(printed[0], "0000000000000000_0000000000000000");
}

#[test]
fn minus_one_is_the_start_and_now_is_the_tail() {
    assert_eq!("-1".parse::<Offset>().unwrap(), Offset::START);
    assert_eq!("now".parse::<Position>().unwrap(), Position::Now);
    assert_eq!("-1".parse::<Position>().unwrap(), Position::START);
}

#[test]
fn malformed_offsets_are_rejected() {
    for bad in [
        "",
        "abc",
        "1",
        "-2",
        "0000000000000000_000000000000000",
        "0000000000000000_00000000000000001",
        "0000000000000001_0000000000000000",
        "0000000000000000_000000000000000a",
        "0000000000000000,0000000000000000",
        "now",
    ] {
        assert!(
            matches!(bad.parse::<Offset>(), Err(Error::InvalidOffset { .. })),
            "{bad:?} should be invalid"
        );
    }
}

#[test]
fn paths_reject_empty_dot_and_control_segments() {
    for bad in ["", "/a", "a/", "a//b", "a/./b", "a/../b", "a\nb", &"x".repeat(1025)] {
        assert!(StreamPath::parse(bad).is_err(), "{bad:?} should be invalid");
    }
    for good in ["a", "sessions/01JD", "a b/c-d_e.f~g", "ü/ñ"] {
        assert!(StreamPath::parse(good).is_ok(), "{good:?} should be valid");
    }
}

#[test]
fn content_types_compare_by_essence() {
    let a = ContentType::parse("application/json; charset=utf-8").unwrap();
    let b = ContentType::parse("Application/JSON").unwrap();
    assert_eq!(a, b);
    assert!(a.is_json() && a.is_text());
    assert!(ContentType::parse("text/plain").unwrap().is_text());
    assert!(!ContentType::octet_stream().is_text());
    for bad in ["", "json", "application/", "/json", "a/b\u{7f}"] {
        assert!(ContentType::parse(bad).is_err(), "{bad:?} should be invalid");
    }
}

#[test]
fn giving_both_ttl_and_expires_at_is_an_error() {
    assert!(Expiry::from_headers(Some(1), Some(1)).is_err());
    assert_eq!(Expiry::from_headers(None, None).unwrap(), Expiry::Never);
    assert_eq!(Expiry::Ttl { seconds: 2 }.deadline_ms(1000), Some(3000));
}
