//! One module per section of the dashboard.

pub mod keys;
pub mod models;
pub mod overview;
pub mod playground;
pub mod plugins;
pub mod signin;
pub mod workers;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    Overview,
    Models,
    Playground,
    Plugins,
    Workers,
    Keys,
}

impl Page {
    pub const ALL: [Page; 6] = [
        Page::Overview,
        Page::Models,
        Page::Playground,
        Page::Plugins,
        Page::Workers,
        Page::Keys,
    ];

    pub fn path(self) -> &'static str {
        match self {
            Page::Overview => "/",
            Page::Models => "/models",
            Page::Playground => "/playground",
            Page::Plugins => "/plugins",
            Page::Workers => "/workers",
            Page::Keys => "/keys",
        }
    }

    pub fn from_path(path: &str) -> Page {
        let path = path.trim_end_matches('/');
        Page::ALL
            .into_iter()
            .find(|p| p.path() == path && *p != Page::Overview)
            .unwrap_or(Page::Overview)
    }

    pub fn title(self) -> &'static str {
        match self {
            Page::Overview => "Overview",
            Page::Models => "Models",
            Page::Playground => "Playground",
            Page::Plugins => "Plugins & pipelines",
            Page::Workers => "Workers",
            Page::Keys => "API keys",
        }
    }

    /// The label on a phone's navigation grid (a third of 390 px).
    pub fn short_title(self) -> &'static str {
        match self {
            Page::Plugins => "Plugins",
            Page::Keys => "Keys",
            p => p.title(),
        }
    }

    pub fn icon(self) -> &'static str {
        match self {
            Page::Overview => "▦",
            Page::Models => "◇",
            Page::Playground => "▶",
            Page::Plugins => "◧",
            Page::Workers => "⚙",
            Page::Keys => "◎",
        }
    }
}
