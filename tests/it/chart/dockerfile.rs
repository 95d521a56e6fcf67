//! The repository's Dockerfile read as instructions grouped in stages: enough of the format
//! (continuation lines, comments, `FROM … AS name`, `ARG`/`ENV`/`USER`/`COPY`/`CMD`) for the
//! image tests to check what the build would do without building it.

use serde_json::Value;

use super::read;

/// One instruction, its continuation lines joined.
#[derive(Debug)]
pub struct Instruction {
    /// The stage it belongs to (`AS` name, or the stage's index when unnamed).
    pub stage: String,
    /// Upper-cased: `RUN`, `COPY`, ...
    pub keyword: String,
    pub args: String,
}

/// A build stage: its name and what it is `FROM` (an image or an earlier stage).
#[derive(Debug)]
pub struct Stage {
    pub name: String,
    pub base: String,
}

/// A `COPY` instruction: `--from=` stage (None: the build context), sources, destination.
#[derive(Debug)]
pub struct Copy {
    pub stage: String,
    pub from: Option<String>,
    pub sources: Vec<String>,
    pub destination: String,
}

#[derive(Debug)]
pub struct Dockerfile {
    pub stages: Vec<Stage>,
    pub instructions: Vec<Instruction>,
}

impl Dockerfile {
    /// The repository's `Dockerfile`.
    pub fn read() -> Dockerfile {
        Dockerfile::parse(&read("Dockerfile"))
    }

    pub fn parse(text: &str) -> Dockerfile {
        let mut logical = Vec::new();
        let mut pending = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            // Comment lines are dropped, also between continuation lines (as Docker does).
            if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
                continue;
            }
            match trimmed.strip_suffix('\\') {
                Some(head) => {
                    pending.push_str(head);
                    pending.push(' ');
                }
                None => {
                    pending.push_str(trimmed);
                    logical.push(std::mem::take(&mut pending));
                }
            }
        }
        assert!(
            pending.is_empty(),
            "the Dockerfile ends inside a continuation"
        );

        let mut stages: Vec<Stage> = Vec::new();
        let mut instructions = Vec::new();
        for line in logical {
            let (keyword, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
            let (keyword, args) = (keyword.to_ascii_uppercase(), args.trim().to_owned());
            if keyword == "FROM" {
                let words: Vec<&str> = args.split_whitespace().collect();
                let name = match words.as_slice() {
                    [_, r#as, name] if r#as.eq_ignore_ascii_case("as") => (*name).to_owned(),
                    [_] => stages.len().to_string(),
                    other => panic!("unexpected FROM {other:?}"),
                };
                stages.push(Stage {
                    name,
                    base: words[0].to_owned(),
                });
            }
            let stage = stages
                .last()
                .unwrap_or_else(|| panic!("{keyword} before the first FROM"))
                .name
                .clone();
            instructions.push(Instruction {
                stage,
                keyword,
                args,
            });
        }
        Dockerfile {
            stages,
            instructions,
        }
    }

    /// The stage named `name`; panics when there is none.
    pub fn stage(&self, name: &str) -> &Stage {
        self.stages
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no stage {name} in the Dockerfile"))
    }

    /// The stage `name` and the stages it is built `FROM`, nearest first.
    fn lineage(&self, name: &str) -> Vec<&Stage> {
        let mut chain = vec![self.stage(name)];
        while let Some(base) = self
            .stages
            .iter()
            .find(|s| s.name == chain[chain.len() - 1].base)
        {
            chain.push(base);
        }
        chain
    }

    /// The instructions with `keyword` of stage `name` alone.
    pub fn in_stage<'a>(
        &'a self,
        name: &'a str,
        keyword: &'a str,
    ) -> impl Iterator<Item = &'a str> {
        self.instructions
            .iter()
            .filter(move |i| i.stage == name && i.keyword == keyword)
            .map(|i| i.args.as_str())
    }

    /// The last value an instruction with `keyword` gives in stage `name` or, failing that, in
    /// the stages it is built from (what `USER`, `CMD`, `ENTRYPOINT` mean in the image).
    pub fn effective<'a>(&'a self, name: &str, keyword: &'a str) -> Option<&'a str> {
        self.lineage(name)
            .into_iter()
            .find_map(|stage| self.in_stage(&stage.name, keyword).last())
    }

    /// `NAME=value` pairs of the `keyword` (`ARG` or `ENV`) instructions of stage `name` and the
    /// stages it is built from, the nearest stage's last value winning. Values are taken as
    /// written: this Dockerfile quotes none.
    pub fn variables(&self, name: &str, keyword: &str) -> Vec<(String, String)> {
        let mut found: Vec<(String, String)> = Vec::new();
        for stage in self.lineage(name).into_iter().rev() {
            for args in self.in_stage(&stage.name, keyword) {
                for pair in args.split_whitespace() {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    found.retain(|(k, _)| k != key);
                    found.push((key.to_owned(), value.to_owned()));
                }
            }
        }
        found
    }

    /// The value of variable `key` (see `variables`); panics when it is not set.
    pub fn variable(&self, name: &str, keyword: &str, key: &str) -> String {
        self.variables(name, keyword)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {keyword} {key} in stage {name} or its bases"))
    }

    /// An exec-form instruction (`CMD ["run", ...]`) of stage `name` or its bases, as words.
    pub fn exec_form(&self, name: &str, keyword: &str) -> Vec<String> {
        let args = self
            .effective(name, keyword)
            .unwrap_or_else(|| panic!("no {keyword} for stage {name}"));
        let words: Value = serde_json::from_str(args)
            .unwrap_or_else(|e| panic!("{keyword} {args} is not the exec (JSON) form: {e}"));
        words
            .as_array()
            .expect("a JSON array")
            .iter()
            .map(|w| w.as_str().expect("strings").to_owned())
            .collect()
    }

    /// Every `COPY`, with its `--from=` and without its other flags.
    pub fn copies(&self) -> Vec<Copy> {
        self.instructions
            .iter()
            .filter(|i| i.keyword == "COPY")
            .map(|i| {
                let mut from = None;
                let mut paths = Vec::new();
                for word in i.args.split_whitespace() {
                    match word.strip_prefix("--") {
                        Some(flag) => {
                            if let Some(stage) = flag.strip_prefix("from=") {
                                from = Some(stage.to_owned());
                            }
                        }
                        None => paths.push(word.to_owned()),
                    }
                }
                let destination = paths.pop().expect("COPY has a destination");
                assert!(!paths.is_empty(), "COPY {} has no source", i.args);
                Copy {
                    stage: i.stage.clone(),
                    from,
                    sources: paths,
                    destination,
                }
            })
            .collect()
    }
}
