//! The report document: what a report or a comparison says, in order, without syntax.
//! `sections` builds it from the report model; each [`Markup`] (Markdown, HTML)
//! only knows how to write each kind of block, like hyperfine's `MarkupExporter`.

/// A whole document: its title and its blocks, in reading order.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// What the document is (HTML's `<title>`).
    pub title: String,
    /// The content.
    pub blocks: Vec<Block>,
}

/// One block of a document.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A heading; level 1 is the document's own.
    Heading(u8, Text),
    /// A paragraph.
    Paragraph(Text, Para),
    /// A bulleted list.
    List(List),
    /// What the reader must know before the numbers (warnings), set apart.
    Callout(Callout),
    /// Named values in titled cards: the server, the configuration, the corpus.
    Cards(Vec<Card>),
    /// A table.
    Table(Table),
    /// One figure on its own.
    Figure(Figure),
    /// Figures side by side.
    Gallery(Vec<Figure>),
    /// Text shown as is, in a fixed-width font.
    Preformatted(String),
    /// The closing line: who built the document, from what.
    Footer(Text),
}

/// What a paragraph is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Para {
    /// Body text.
    Plain,
    /// The line under a heading: where the data came from.
    Subtitle,
    /// How to read what is around it: methods, legends.
    Note,
}

/// A bulleted list.
#[derive(Debug, Clone, PartialEq)]
pub struct List {
    /// What the list holds.
    pub kind: ListKind,
    /// The items.
    pub items: Vec<Item>,
}

/// What a list holds, for syntaxes that style them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// Ordinary items.
    Bullets,
    /// The legend of a table or a map.
    Legend,
    /// Scaling fits, each with its notes.
    Fits,
}

/// One list item, with its own sub-items.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The item's text.
    pub text: Text,
    /// How it should stand out.
    pub tone: Tone,
    /// Sub-items, one level down.
    pub children: Vec<Item>,
}

/// A set-apart list of things to know first.
#[derive(Debug, Clone, PartialEq)]
pub struct Callout {
    /// Its heading (`Warnings`), if any.
    pub title: Option<String>,
    /// One item per thing.
    pub items: Vec<Item>,
}

/// A titled card of named values.
#[derive(Debug, Clone, PartialEq)]
pub struct Card {
    /// The card's heading.
    pub title: String,
    /// Groups of (name, value) rows, in order.
    pub groups: Vec<Vec<(String, String)>>,
}

/// A table: head, alignment and rows, with an optional title above it.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// What the cells are, said above the table.
    pub title: Option<String>,
    /// Column headings.
    pub head: Vec<String>,
    /// How each column is aligned.
    pub align: Vec<Align>,
    /// The rows, as many cells as `head`.
    pub rows: Vec<Vec<Cell>>,
    /// A short side table (two columns, no heading of its own): HTML writes its rows
    /// on one line.
    pub compact: bool,
}

/// How a column is aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: left.
    Left,
    /// Numbers: right, so that digits line up.
    Right,
}

/// One table cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The cell's text.
    pub text: Text,
    /// Its colour, where the syntax has colour.
    pub tone: Tone,
    /// Stands out where the syntax has no colour (a verdict in Markdown).
    pub strong: bool,
}

/// How something stands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Not at all.
    Normal,
    /// A change for the better.
    Good,
    /// A change for the worse, or data left out.
    Bad,
    /// Secondary: ranges, unchanged verdicts.
    Muted,
    /// To be read with care: an extrapolation.
    Caution,
}

/// A figure: an SVG drawing and what it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// The SVG document.
    pub svg: String,
    /// What it shows, in a sentence.
    pub caption: String,
}

/// Inline text: a run of spans.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Text(pub Vec<Span>);

/// A piece of inline text.
#[derive(Debug, Clone, PartialEq)]
pub enum Span {
    /// Words.
    Plain(String),
    /// Words that stand out.
    Strong(String),
    /// A name, path or value to be read literally.
    Code(String),
    /// Words in a tone (a muted range, a bad "poor fit").
    Toned(Tone, String),
    /// A line break within a paragraph.
    Break,
}

impl Text {
    /// The text with one more span.
    pub fn and(mut self, span: Span) -> Self {
        self.0.push(span);
        self
    }

    /// The text with more plain words.
    pub fn plain(self, s: impl Into<String>) -> Self {
        self.and(Span::Plain(s.into()))
    }

    /// The text with a literal name or value.
    pub fn code(self, s: impl Into<String>) -> Self {
        self.and(Span::Code(s.into()))
    }

    /// The words alone, without tones or emphasis (line breaks become spaces).
    pub fn to_plain(&self) -> String {
        self.0
            .iter()
            .map(|s| match s {
                Span::Plain(t) | Span::Strong(t) | Span::Code(t) | Span::Toned(_, t) => t.as_str(),
                Span::Break => " ",
            })
            .collect()
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text(vec![Span::Plain(s)])
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        s.to_owned().into()
    }
}

impl Item {
    /// A plain item without sub-items.
    pub fn new(text: impl Into<Text>) -> Self {
        Item {
            text: text.into(),
            tone: Tone::Normal,
            children: Vec::new(),
        }
    }
}

impl<T: Into<Text>> From<T> for Cell {
    fn from(text: T) -> Self {
        Cell {
            text: text.into(),
            tone: Tone::Normal,
            strong: false,
        }
    }
}

impl Table {
    /// An untitled table with these headings and alignments, and no rows yet.
    pub fn new<S: Into<String>>(head: impl IntoIterator<Item = (S, Align)>) -> Self {
        let (head, align) = head.into_iter().map(|(h, a)| (h.into(), a)).unzip();
        Table {
            title: None,
            head,
            align,
            rows: Vec::new(),
            compact: false,
        }
    }

    /// Adds a row.
    pub fn row<C: Into<Cell>>(&mut self, cells: impl IntoIterator<Item = C>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }
}

/// One syntax: how each kind of block is written. [`write()`] walks the document.
pub trait Markup {
    /// Which document this syntax is given (see [`Target`]).
    const TARGET: Target;
    /// A heading.
    fn heading(&self, out: &mut String, level: u8, text: &Text);
    /// A paragraph.
    fn paragraph(&self, out: &mut String, text: &Text, kind: Para);
    /// A list.
    fn list(&self, out: &mut String, list: &List);
    /// A callout.
    fn callout(&self, out: &mut String, callout: &Callout);
    /// Cards of named values.
    fn cards(&self, out: &mut String, cards: &[Card]);
    /// A table.
    fn table(&self, out: &mut String, table: &Table);
    /// One figure.
    fn figure(&self, out: &mut String, figure: &Figure);
    /// Figures side by side.
    fn gallery(&self, out: &mut String, figures: &[Figure]);
    /// Preformatted text.
    fn preformatted(&self, out: &mut String, text: &str);
    /// The closing line.
    fn footer(&self, out: &mut String, text: &Text);
    /// The whole file around the written blocks; the blocks alone by default.
    fn finish(&self, _doc: &Document, body: String) -> String {
        body
    }
}

/// Writes a document in one syntax.
pub fn write<M: Markup>(doc: &Document, m: &M) -> String {
    let mut out = String::new();
    for b in &doc.blocks {
        match b {
            Block::Heading(level, t) => m.heading(&mut out, *level, t),
            Block::Paragraph(t, kind) => m.paragraph(&mut out, t, *kind),
            Block::List(l) => m.list(&mut out, l),
            Block::Callout(c) => m.callout(&mut out, c),
            Block::Cards(c) => m.cards(&mut out, c),
            Block::Table(t) => m.table(&mut out, t),
            Block::Figure(f) => m.figure(&mut out, f),
            Block::Gallery(f) => m.gallery(&mut out, f),
            Block::Preformatted(t) => m.preformatted(&mut out, t),
            Block::Footer(t) => m.footer(&mut out, t),
        }
    }
    m.finish(doc, out)
}

/// Which syntax a document is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A Markdown file: compact, no plots.
    Markdown,
    /// A self-contained HTML page: cards and inline plots.
    Html,
}
