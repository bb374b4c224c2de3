//! The configurations the INEC paper evaluates (§IV-A), in one place for the tests, the
//! model table and the benchmarks.

use codes::Code;

use crate::plan::Scheme;

/// The paper's codes: three RS and three Azure LRC configurations.
pub const PAPER_CODES: [&str; 6] = [
    "rs:3,2",
    "rs:6,3",
    "rs:12,4",
    "lrc:4,2,2",
    "lrc:6,2,2",
    "lrc:12,2,2",
];

/// The schemes that apply to a code: its own (RS or LRC), then PPR, ECPipe and TriEC.
pub fn schemes_for(code: Code) -> [Scheme; 4] {
    let own = match code {
        Code::Rs { .. } => Scheme::Rs,
        Code::Lrc { .. } => Scheme::Lrc,
    };
    [own, Scheme::Ppr, Scheme::Ecpipe, Scheme::Triec]
}

/// The paper's codes, parsed.
pub fn paper_codes() -> Vec<Code> {
    PAPER_CODES
        .iter()
        .map(|c| c.parse().expect("the paper's codes parse"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paper_codes_parse_and_get_their_own_scheme_first() {
        let codes = paper_codes();
        assert_eq!(codes.len(), 6);
        assert_eq!(schemes_for(codes[0])[0], Scheme::Rs);
        assert_eq!(schemes_for(codes[5])[0], Scheme::Lrc);
        assert_eq!(codes[5].to_string(), "lrc:12,2,2");
    }
}
