//! Parameters, parsing, refusal messages and the decoder cache.

use std::sync::Arc;

use codes::{Code, CodeError, Codec, Kernel, MatrixKind};

fn parse_err(s: &str) -> CodeError {
    let e = s.parse::<Code>().unwrap_err();
    assert!(e.is_bad_parameters(), "{s}: {e:?}");
    e
}

#[test]
fn parse_and_print_round_trip() {
    for s in [
        "rs:6,3",
        "rs-vand:10,4",
        "rs-xor:6,3",
        "rs-xor:200,56",
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
    let text = |s: &str| s.to_string();
    assert_eq!(
        parse_err("rs6,3"),
        CodeError::Unparsable {
            input: text("rs6,3")
        }
    );
    assert_eq!(
        parse_err("foo:1,2"),
        CodeError::UnknownCode {
            name: text("foo"),
            input: text("foo:1,2")
        }
    );
    assert_eq!(
        parse_err("rs:6"),
        CodeError::WrongParameterCount {
            name: "rs",
            expected: 2,
            found: 1,
            input: text("rs:6")
        }
    );
    assert!(matches!(
        parse_err("lrc:12,2"),
        CodeError::WrongParameterCount {
            name: "lrc",
            expected: 3,
            found: 2,
            ..
        }
    ));
    assert_eq!(
        parse_err("rs:a,3"),
        CodeError::NotAnInteger {
            token: text("a"),
            input: text("rs:a,3")
        }
    );
    assert!(matches!(parse_err("rs:-1,3"), CodeError::NotAnInteger { token, .. } if token == "-1"));
    assert_eq!(parse_err("rs:0,3"), CodeError::NoDataChunks);
    assert_eq!(parse_err("rs:6,0"), CodeError::NoParityChunks);
    assert_eq!(
        parse_err("rs:250,10"),
        CodeError::TooManyChunks { n: 260, max: 256 }
    );
    assert_eq!(
        parse_err("lrc:12,5,2"),
        CodeError::GroupsDoNotDivide { k: 12, l: 5 }
    );
    assert_eq!(parse_err("lrc:12,0,2"), CodeError::NoLocalGroups);
    assert!(matches!(
        parse_err("rs-vand:22,4"),
        CodeError::NotMds {
            k: 22,
            m: 4,
            max_k: 21,
            ..
        }
    ));
    let long = format!("rs:{}", "1".repeat(100));
    assert_eq!(
        parse_err(&long),
        CodeError::CodeStringTooLong { len: 103, max: 64 }
    );
}

#[test]
fn parameter_messages_name_the_value_and_the_limit() {
    let cases = [
        ("rs6,3", "cannot parse \"rs6,3\" as a code: expected rs:K,M"),
        ("foo:1,2", "unknown code \"foo\" in \"foo:1,2\""),
        ("rs:6", "rs takes 2 parameters, \"rs:6\" gives 1"),
        (
            "rs:a,3",
            "\"a\" in \"rs:a,3\" is not a non-negative integer",
        ),
        ("rs:0,3", "k = 0: a stripe needs at least 1 data chunk"),
        (
            "rs:6,0",
            "m = 0: an rs stripe needs at least 1 parity chunk",
        ),
        ("rs:250,10", "260 chunks per stripe, at most 256 in gf(2^8)"),
        ("lrc:12,5,2", "l = 5 does not divide k = 12"),
        ("lrc:12,0,2", "l = 0: an lrc needs at least 1 local group"),
    ];
    for (input, expect) in cases {
        let msg = parse_err(input).to_string();
        assert!(msg.starts_with(expect), "{input}: {msg:?} lacks {expect:?}");
        assert!(!msg.starts_with(char::is_uppercase), "{msg}");
    }
    let msg = parse_err("rs-vand:22,4").to_string();
    assert!(msg.starts_with("rs-vand:22,4: "), "{msg}");
    assert!(msg.contains("not mds for k = 22, m = 4"), "{msg}");
    assert!(msg.contains("mds only up to k = 21"), "{msg}");
    assert!(msg.contains("use rs:22,4 (cauchy)"), "{msg}");
}

/// `k + m` used to saturate at usize::MAX, so the error reported the wrong chunk count.
#[test]
fn too_many_chunks_reports_the_exact_count_for_huge_k() {
    let e = Code::rs(usize::MAX, 1).unwrap_err();
    assert_eq!(
        e,
        CodeError::TooManyChunks {
            n: usize::MAX as u128 + 1,
            max: 256
        }
    );
    assert!(e
        .to_string()
        .starts_with("18446744073709551616 chunks per stripe"));
    let e = Code::lrc(usize::MAX, usize::MAX, usize::MAX).unwrap_err();
    assert_eq!(
        e,
        CodeError::TooManyChunks {
            n: 3 * usize::MAX as u128,
            max: 256
        }
    );
}

#[test]
fn parameter_limits() {
    assert!(Code::rs(1, 1).is_ok());
    assert!(Code::rs(255, 1).is_ok());
    assert!(Code::rs(128, 128).is_ok());
    assert_eq!(
        Code::rs(200, 57),
        Err(CodeError::TooManyChunks { n: 257, max: 256 })
    );
    assert!(Code::lrc(252, 2, 2).is_ok());
    assert_eq!(
        Code::lrc(252, 2, 3),
        Err(CodeError::TooManyChunks { n: 257, max: 256 })
    );
    assert_eq!(Code::lrc(0, 1, 1), Err(CodeError::NoDataChunks));
    // A code built from the enum is checked by validate and by Codec::try_new.
    let bad = Code::Rs {
        k: 4,
        m: 0,
        matrix: MatrixKind::Cauchy,
    };
    assert_eq!(bad.validate(), Err(CodeError::NoParityChunks));
    assert_eq!(
        Codec::try_new(bad, Kernel::reference(), 4).unwrap_err(),
        CodeError::NoParityChunks
    );
    // An invalid LRC built from the enum has no groups rather than dividing by zero.
    assert_eq!(Code::Lrc { k: 4, l: 0, r: 1 }.group_of(1), None);
    assert_eq!(Code::Lrc { k: 2, l: 4, r: 1 }.group_of(1), None);
}

#[test]
fn vandermonde_refused_where_not_mds() {
    let vand = |k, m| Code::rs_with(k, m, MatrixKind::Vandermonde);
    let max_k_of = |k, m| match vand(k, m) {
        Err(CodeError::NotMds { max_k, .. }) => max_k,
        other => panic!("rs-vand {k},{m}: expected NotMds, got {other:?}"),
    };
    // m ≤ 3: MDS for any k that fits.
    for (k, m) in [(1, 1), (253, 3), (254, 2), (255, 1), (100, 3)] {
        assert!(vand(k, m).is_ok(), "rs-vand {k},{m}");
    }
    // m = 4: MDS exactly up to k = 21.
    assert!(vand(21, 4).is_ok());
    assert!(vand(10, 4).is_ok());
    assert_eq!(max_k_of(22, 4), 21);
    // Larger m: refused beyond the limit the exact check finds.
    assert!(vand(5, 5).is_ok());
    assert_eq!(max_k_of(6, 5), 5);
    assert!(vand(4, 8).is_ok());
    assert_eq!(max_k_of(12, 8), 4);
    assert_eq!(max_k_of(200, 56), 3);
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
