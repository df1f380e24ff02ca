//! The Markdown the suites' reports are written in: tables of a row per
//! cell, bulleted sections, and figures with as many decimals as they
//! need. Text only: it knows no suite, and a missing figure is always
//! shown as `–`.

/// A table being written: a header, then rows as wide as the header.
pub(crate) struct Table {
    text: String,
    width: usize,
}

impl Table {
    /// A table of `columns` (their names between ` | `): the first `left`
    /// of them (names) aligned left, the rest (figures) right.
    pub fn new(columns: &str, left: usize) -> Table {
        let columns: Vec<&str> = columns.split(" | ").collect();
        let align = |i| if i < left { "---|" } else { "---:|" };
        let rule: String = (0..columns.len()).map(align).collect();
        let text = format!("| {} |\n|{rule}\n", columns.join(" | "));
        Table {
            text,
            width: columns.len(),
        }
    }

    /// A row: its names, then its figures.
    pub fn row(&mut self, names: &[&str], figures: &[String]) {
        let figures = figures.iter().map(String::as_str);
        let cells: Vec<&str> = names.iter().copied().chain(figures).collect();
        assert_eq!(cells.len(), self.width, "a row as wide as the header");
        self.text.push_str(&format!("| {} |\n", cells.join(" | ")));
    }

    /// A row without figures: `why` (skipped, failed) in the first figure's
    /// column, `–` in the others.
    pub fn gap(&mut self, names: &[&str], why: &str) {
        let mut figures = vec![why.to_string()];
        figures.resize(self.width - names.len(), "–".into());
        self.row(names, &figures);
    }

    pub fn text(self) -> String {
        self.text
    }
}

/// `heading:` and a bullet for each item, after a blank line; nothing
/// without items.
pub(crate) fn section(heading: &str, items: impl IntoIterator<Item = String>) -> String {
    let bullets = bullets(items);
    if bullets.is_empty() {
        return bullets;
    }
    format!("\n{heading}:\n\n{bullets}")
}

/// `- item` lines.
pub(crate) fn bullets(items: impl IntoIterator<Item = String>) -> String {
    items.into_iter().map(|i| format!("- {i}\n")).collect()
}

/// A figure with as many decimals as it needs.
pub(crate) fn figure(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// `x` as `show` writes it, or `–` without it.
pub(crate) fn or_dash<T>(x: Option<T>, show: impl FnOnce(T) -> String) -> String {
    x.map_or("–".into(), show)
}

/// A ratio, to two decimals.
pub(crate) fn ratio(x: Option<f64>) -> String {
    or_dash(x, |x| format!("{x:.2}"))
}

/// Bytes as MB, to one decimal.
pub(crate) fn mb(bytes: Option<u64>) -> String {
    or_dash(bytes, |b| format!("{:.1}", b as f64 / 1e6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_as_wide_as_their_header() {
        let check = |rows: &dyn Fn(&mut Table), expect: &str| {
            let mut t = Table::new("load | mode | time s | vs async", 2);
            rows(&mut t);
            assert_eq!(t.text(), expect);
        };
        let header = "| load | mode | time s | vs async |\n|---|---|---:|---:|\n";
        check(&|_| {}, header);
        check(
            &|t| t.row(&["untar", "async"], &["1.50".into(), "1.00".into()]),
            &format!("{header}| untar | async | 1.50 | 1.00 |\n"),
        );
        check(
            &|t| t.gap(&["untar", "async"], "failed"),
            &format!("{header}| untar | async | failed | – |\n"),
        );
        check(
            &|t| t.gap(&["untar", "async", "1.50"], "skipped: why"),
            &format!("{header}| untar | async | 1.50 | skipped: why |\n"),
        );
    }

    #[test]
    #[should_panic(expected = "as wide as the header")]
    fn a_row_of_another_width_is_a_bug() {
        Table::new("a | b", 1).row(&["x"], &[]);
    }

    #[test]
    fn sections_and_figures() {
        let check = |got: String, expect: &str| assert_eq!(got, expect);
        check(section("Failures", Vec::new()), "");
        check(
            section("Failures", ["a".to_string(), "b".to_string()]),
            "\nFailures:\n\n- a\n- b\n",
        );
        check(figure(1234.4), "1234");
        check(figure(12.345), "12.3");
        check(figure(1.2345), "1.23");
        check(ratio(Some(0.376)), "0.38");
        check(ratio(None), "–");
        check(mb(Some(1_260_000)), "1.3");
        check(or_dash(Some(3), |x| x.to_string()), "3");
    }
}
