//! The command-line reference: every command of `infergate` with its usage, its description and
//! a table of its arguments (flag, environment variable, default, meaning), read from the clap
//! command itself, so it says what `--help` says.

use clap::builder::StyledStr;
use clap::{Arg, Command};
use std::fmt::Write;

/// The reference as Markdown: a section per command, subcommands inside their parent's.
pub(crate) fn markdown(mut cli: Command) -> String {
    // Gives every subcommand its full name (`infergate keys create`) for its usage line.
    cli.build();
    let mut out = String::new();
    for command in visible(&cli) {
        write_command(&mut out, command, 2);
    }
    out
}

fn visible(command: &Command) -> impl Iterator<Item = &Command> {
    command
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
}

fn write_command(out: &mut String, command: &Command, depth: usize) {
    let name = command
        .get_bin_name()
        .map_or_else(|| command.get_name().to_owned(), str::to_owned);
    let _ = writeln!(out, "{} {name}\n", "#".repeat(depth));
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        let _ = writeln!(out, "{}\n", prose(about));
    }
    let has_subcommands = visible(command).next().is_some();
    if !has_subcommands {
        let usage = command.clone().render_usage().to_string();
        let usage = usage.trim_start_matches("Usage:").trim();
        let _ = writeln!(out, "```text\n{usage}\n```\n");
        let args: Vec<&Arg> = command
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
            .collect();
        if !args.is_empty() {
            out.push_str("| argument | environment | default | meaning |\n");
            out.push_str("| --- | --- | --- | --- |\n");
            for arg in args {
                write_arg(out, arg);
            }
            out.push('\n');
        }
    }
    for sub in visible(command) {
        write_command(out, sub, depth + 1);
    }
}

fn write_arg(out: &mut String, arg: &Arg) {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    let takes_value = arg.get_action().takes_values();
    let name = match (arg.get_long(), arg.get_short()) {
        (Some(long), _) if takes_value => format!("--{long} {value}"),
        (Some(long), _) => format!("--{long}"),
        (None, Some(short)) if takes_value => format!("-{short} {value}"),
        (None, Some(short)) => format!("-{short}"),
        (None, None) => value,
    };
    let env = arg
        .get_env()
        .map_or_else(|| "—".to_owned(), |e| format!("`{}`", e.to_string_lossy()));
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(prose)
        .unwrap_or_default();
    // A default clap knows, else the one the help text states as `[default: ...]`.
    let (help, stated) = match help.rfind("[default: ") {
        Some(at) if help.trim_end_matches('.').ends_with(']') => {
            let stated = help[at + "[default: ".len()..]
                .trim_end_matches('.')
                .trim_end_matches(']')
                .to_owned();
            (help[..at].trim_end().to_owned(), Some(stated))
        }
        _ => (help, None),
    };
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    let default = if !defaults.is_empty() {
        defaults.join(", ")
    } else {
        stated.map_or_else(|| "—".to_owned(), |s| cell(&s))
    };
    let mut meaning = cell(&help);
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !possible.is_empty() && takes_value {
        // Flag help is written without a closing full stop, as clap shows it.
        if !meaning.trim_end().ends_with('.') && !meaning.trim().is_empty() {
            meaning = format!("{}.", meaning.trim_end());
        }
        let _ = write!(meaning, " One of {}.", possible.join(", "));
    }
    let repeat = if matches!(arg.get_action(), clap::ArgAction::Append) {
        " (repeatable)"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "| `{name}`{repeat} | {env} | {default} | {} |",
        meaning.trim()
    );
}

/// Help text as one Markdown paragraph per paragraph of it.
fn prose(text: &StyledStr) -> String {
    text.to_string()
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Text fit for one cell of a Markdown table: one line, no column separator, no HTML tag.
fn cell(text: &str) -> String {
    text.replace("\n\n", "<br><br>")
        .replace('\n', " ")
        .replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('*', "\\*")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    #[command(name = "tool")]
    struct Tool {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        /// Does a thing.
        Thing {
            /// How many times [default: once per call].
            #[arg(long, env = "TOOL_TIMES")]
            times: Option<u32>,
            /// Where.
            #[arg(long, default_value = "here")]
            place: String,
            /// The file.
            file: String,
        },
    }

    #[test]
    fn each_argument_shows_its_flag_environment_default_and_meaning() {
        let text = markdown(<Tool as clap::CommandFactory>::command());
        // clap drops the period that ends a one-line doc comment.
        assert!(text.contains("## tool thing\n\nDoes a thing\n"), "{text}");
        assert!(
            text.contains("```text\ntool thing [OPTIONS] <FILE>\n```"),
            "{text}"
        );
        assert!(
            text.contains("| `--times <TIMES>` | `TOOL_TIMES` | once per call | How many times |"),
            "{text}"
        );
        assert!(
            text.contains("| `--place <PLACE>` | — | `here` | Where |"),
            "{text}"
        );
        assert!(text.contains("| `<FILE>` | — | — | The file |"), "{text}");
    }
}
