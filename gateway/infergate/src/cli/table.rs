//! Plain-text tables for the list commands: each column as wide as its widest cell, so long
//! names and ids never run into the next column.

/// A table of string cells under a header row.
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Table {
        Table {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: ToString,
    {
        self.rows
            .push(cells.into_iter().map(|c| c.to_string()).collect());
    }

    /// The table as lines; the last column is not padded (no trailing spaces).
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let mut out = String::new();
            for (i, cell) in cells.take(columns).enumerate() {
                if i + 1 == columns {
                    out.push_str(cell);
                } else {
                    let pad = widths[i] - cell.chars().count() + 2;
                    out.push_str(cell);
                    out.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.truncate(out.trim_end().len());
            out.push('\n');
            out
        };
        let mut out = line(&mut self.header.iter().copied());
        for row in &self.rows {
            out.push_str(&line(&mut row.iter().map(String::as_str)));
        }
        out
    }

    pub fn print(&self) {
        print!("{}", self.render());
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut t = Table::new(&["ID", "NAME", "SCOPES"]);
        t.row(["1", "a-rather-long-name", "infer"]);
        t.row(["12345", "b", ""]);
        assert_eq!(
            t.render(),
            "ID     NAME                SCOPES\n\
             1      a-rather-long-name  infer\n\
             12345  b\n"
        );
    }

    #[test]
    fn an_empty_table_prints_its_header() {
        assert_eq!(Table::new(&["NAME", "VERSION"]).render(), "NAME  VERSION\n");
    }
}
