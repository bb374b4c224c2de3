//! Parameters, parsing, refusal messages and the decoder cache.

use std::sync::Arc;

use codes::{Code, CodeError, Codec, Kernel, MatrixKind};

fn reason(e: CodeError) -> String {
    match e {
        CodeError::BadParameters { reason } => reason,
        other => panic!("expected bad parameters, got {other:?}"),
    }
}

#[test]
fn parse_and_print_round_trip() {
    for s in [
        "rs:6,3",
        "rs-vand:10,4",
        "lrc:12,2,2",
        "lrc:6,3,0",
        "rs:1,1",
        "rs:128,128",
    ] {
        let code: Code = s.parse().unwrap();
        assert_eq!(code.to_string(), s);
    }
    assert_eq!(
        " rs : 6 , 3 ".parse::<Code>().unwrap(),
        Code::Rs {
            k: 6,
            m: 3,
            matrix: MatrixKind::Cauchy
        }
    );
    assert_eq!(
        "lrc:12,2,2".parse::<Code>().unwrap(),
        Code::Lrc { k: 12, l: 2, r: 2 }
    );
}

#[test]
fn parse_errors_say_what_is_wrong() {
    let cases = [
        ("rs6,3", "no ':'"),
        ("foo:1,2", "unknown code \"foo\""),
        ("rs:6", "rs takes 2 parameters"),
        ("lrc:12,2", "lrc takes 3 parameters"),
        (
            "rs:a,3",
            "\"a\" in \"rs:a,3\" is not a non-negative integer",
        ),
        ("rs:-1,3", "is not a non-negative integer"),
        ("rs:0,3", "k = 0"),
        ("rs:6,0", "m = 0"),
        ("rs:250,10", "260 chunks per stripe, at most 256"),
        ("lrc:12,5,2", "l = 5 does not divide k = 12"),
        ("lrc:12,0,2", "l = 0"),
        ("rs-vand:22,4", "MDS only up to k = 21"),
    ];
    for (input, expect) in cases {
        let msg = reason(input.parse::<Code>().unwrap_err());
        assert!(msg.contains(expect), "{input}: {msg:?} lacks {expect:?}");
    }
    let long = format!("rs:{}", "1".repeat(100));
    assert!(reason(long.parse::<Code>().unwrap_err()).contains("limit of 64"));
}

#[test]
fn parameter_limits() {
    assert!(Code::rs(1, 1).is_ok());
    assert!(Code::rs(255, 1).is_ok());
    assert!(Code::rs(128, 128).is_ok());
    assert!(reason(Code::rs(200, 57).unwrap_err()).contains("257 chunks"));
    assert!(Code::lrc(252, 2, 2).is_ok());
    assert!(reason(Code::lrc(252, 2, 3).unwrap_err()).contains("257 chunks"));
    assert!(reason(Code::lrc(0, 1, 1).unwrap_err()).contains("k = 0"));
    // A code built from the enum is checked by validate and by Codec::try_new.
    let bad = Code::Rs {
        k: 4,
        m: 0,
        matrix: MatrixKind::Cauchy,
    };
    assert!(bad.validate().is_err());
    assert!(Codec::try_new(bad, Kernel::reference(), 4).is_err());
}

#[test]
fn vandermonde_refused_where_not_mds() {
    let vand = |k, m| Code::rs_with(k, m, MatrixKind::Vandermonde);
    // m ≤ 3: MDS for any k that fits.
    for (k, m) in [(1, 1), (253, 3), (254, 2), (255, 1), (100, 3)] {
        assert!(vand(k, m).is_ok(), "rs-vand {k},{m}");
    }
    // m = 4: MDS exactly up to k = 21.
    assert!(vand(21, 4).is_ok());
    assert!(vand(10, 4).is_ok());
    let msg = reason(vand(22, 4).unwrap_err());
    assert!(msg.starts_with("rs-vand:22,4: "), "{msg}");
    assert!(msg.contains("not MDS for k = 22, m = 4"), "{msg}");
    assert!(msg.contains("MDS only up to k = 21"), "{msg}");
    assert!(msg.contains("use rs:22,4 (Cauchy)"), "{msg}");
    // Larger m: refused beyond the limit the exact check finds.
    assert!(vand(5, 5).is_ok());
    assert!(reason(vand(6, 5).unwrap_err()).contains("MDS only up to k = 5"));
    assert!(vand(4, 8).is_ok());
    assert!(reason(vand(12, 8).unwrap_err()).contains("MDS only up to k = 4"));
    assert!(reason(vand(200, 56).unwrap_err()).contains("MDS only up to k = 3"));
    // Cauchy has no such limit.
    assert!(Code::rs(200, 56).is_ok());
}

#[test]
fn groups() {
    let code = Code::lrc(12, 3, 2).unwrap();
    assert_eq!(code.n(), 17);
    assert_eq!(code.parity_count(), 5);
    assert_eq!(code.group_of(0), Some(0));
    assert_eq!(code.group_of(7), Some(1));
    assert_eq!(code.group_of(11), Some(2));
    assert_eq!(code.group_of(13), Some(1));
    assert_eq!(code.group_of(15), None);
    assert_eq!(code.local_group(2), Some(vec![8, 9, 10, 11, 14]));
    assert_eq!(code.local_group(3), None);
    assert_eq!(Code::rs(6, 3).unwrap().group_of(0), None);
    assert_eq!(Code::rs(6, 3).unwrap().local_group(0), None);
}

#[test]
fn decoder_cache_is_bounded_and_shares_calculators() {
    let codec = Codec::with_cache_capacity(Code::rs(6, 3).unwrap(), Kernel::reference(), 4);
    assert_eq!(codec.decoder_cache_capacity(), 4);
    let first = codec.decoder(&[1, 2, 3, 4, 5, 6], &[0]).unwrap();
    let again = codec.decoder(&[1, 2, 3, 4, 5, 6], &[0]).unwrap();
    assert!(
        Arc::ptr_eq(&first, &again),
        "a hit returns the cached calculator"
    );
    // Input order is part of the key.
    let other_order = codec.decoder(&[6, 5, 4, 3, 2, 1], &[0]).unwrap();
    assert!(!Arc::ptr_eq(&first, &other_order));
    for lost in 1..6 {
        let inputs: Vec<usize> = (0..9).filter(|&i| i != lost).take(6).collect();
        codec.decoder(&inputs, &[lost]).unwrap();
        assert!(codec.decoder_cache_len() <= 4);
    }
    assert_eq!(codec.decoder_cache_len(), 4);
    // The first entry was evicted: a new calculator, equal in content.
    let rebuilt = codec.decoder(&[1, 2, 3, 4, 5, 6], &[0]).unwrap();
    assert!(!Arc::ptr_eq(&first, &rebuilt));
    assert_eq!(first.matrix(), rebuilt.matrix());
    // A recently used entry survives newer insertions.
    let keep = codec.decoder(&[0, 2, 3, 4, 5, 6], &[1]).unwrap();
    codec.decoder(&[0, 1, 3, 4, 5, 7], &[2]).unwrap();
    codec.decoder(&[0, 1, 2, 4, 5, 7], &[3]).unwrap();
    assert!(Arc::ptr_eq(
        &keep,
        &codec.decoder(&[0, 2, 3, 4, 5, 6], &[1]).unwrap()
    ));
    // Errors are not cached.
    let before = codec.decoder_cache_len();
    assert!(codec.decoder(&[0, 1], &[2]).is_err());
    assert_eq!(codec.decoder_cache_len(), before);
}

#[test]
fn zero_capacity_cache_still_decodes() {
    let codec = Codec::with_cache_capacity(Code::rs(4, 2).unwrap(), Kernel::reference(), 0);
    let a = codec.decoder(&[1, 2, 3, 4], &[0]).unwrap();
    let b = codec.decoder(&[1, 2, 3, 4], &[0]).unwrap();
    assert!(!Arc::ptr_eq(&a, &b));
    assert_eq!(a.matrix(), b.matrix());
    assert_eq!(codec.decoder_cache_len(), 0);
}

#[test]
fn decoder_cache_is_shared_across_threads() {
    let codec = Arc::new(Codec::new(Code::lrc(12, 2, 2).unwrap()));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let codec = Arc::clone(&codec);
            std::thread::spawn(move || {
                (0..50)
                    .map(|_| codec.decoder(&[1, 2, 3, 4, 5, 12], &[0]).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let all: Vec<Arc<codes::Calculator>> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert!(all.iter().all(|c| Arc::ptr_eq(c, &all[0])));
    assert_eq!(codec.decoder_cache_len(), 1);
}

#[test]
fn error_messages_are_lowercase_and_specific() {
    let e = CodeError::TooFewChunks { have: 3, need: 4 };
    assert_eq!(e.to_string(), "too few chunks: have 3, need 4");
    let e = CodeError::Unrecoverable {
        code: "lrc:4,2,2".into(),
        erased: vec![0, 1, 4, 6],
    };
    assert_eq!(
        e.to_string(),
        "erasure pattern [0, 1, 4, 6] is not recoverable by lrc:4,2,2"
    );
    let e = CodeError::CountMismatch {
        what: "output chunks",
        have: 1,
        expected: 2,
    };
    assert_eq!(
        e.to_string(),
        "wrong number of output chunks: have 1, expected 2"
    );
}
