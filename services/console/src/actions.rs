//! What an operator may do from the console, as types: each action is read
//! from its form field or query (`op`, `do`) by serde, so an unknown one is
//! refused before a handler runs, and says what it does on its confirmation
//! page.

use flow_rules::{OperationCode, PowerOperation};
use serde::Deserialize;

/// A rack power action (`op=on|off`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Power {
    /// Run the rack's power-on rule.
    On,
    /// Run the rack's power-off rule.
    Off,
}

impl Power {
    /// The field value.
    pub fn as_str(self) -> &'static str {
        match self {
            Power::On => "on",
            Power::Off => "off",
        }
    }

    /// The operation submitted.
    pub fn operation(self) -> OperationCode {
        OperationCode::Power(match self {
            Power::On => PowerOperation::PowerOn,
            Power::Off => PowerOperation::PowerOff,
        })
    }
}

/// A rollout action (`do=pause|resume|advance|cancel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Run {
    /// Submit nothing more until resumed.
    Pause,
    /// Go on, accepting the failures that tripped a gate.
    Resume,
    /// Start the next phase.
    Advance,
    /// Stop for good.
    Cancel,
}

impl Run {
    /// The field value.
    pub fn as_str(self) -> &'static str {
        match self {
            Run::Pause => "pause",
            Run::Resume => "resume",
            Run::Advance => "advance",
            Run::Cancel => "cancel",
        }
    }

    /// The verb on the confirmation page.
    pub fn verb(self) -> &'static str {
        match self {
            Run::Pause => "Pause",
            Run::Resume => "Resume",
            Run::Advance => "Advance",
            Run::Cancel => "Cancel",
        }
    }

    /// What follows from it.
    pub fn detail(self) -> &'static str {
        match self {
            Run::Pause => "No further task is submitted until it is resumed; open tasks run on.",
            Run::Resume => "The failures that tripped its gate are accepted and it goes on.",
            Run::Advance => "Its next phase starts.",
            Run::Cancel => "It stops for good and its open tasks are cancelled.",
        }
    }
}

/// A schedule action (`do=pause|resume|trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// Stop firing.
    Pause,
    /// Fire again.
    Resume,
    /// Fire once now.
    Trigger,
}

impl Schedule {
    /// The field value.
    pub fn as_str(self) -> &'static str {
        match self {
            Schedule::Pause => "pause",
            Schedule::Resume => "resume",
            Schedule::Trigger => "trigger",
        }
    }

    /// The verb on the confirmation page.
    pub fn verb(self) -> &'static str {
        match self {
            Schedule::Pause => "Pause",
            Schedule::Resume => "Resume",
            Schedule::Trigger => "Fire",
        }
    }

    /// What follows from it.
    pub fn detail(self) -> &'static str {
        match self {
            Schedule::Pause => "It stops firing until resumed; tasks it made run on.",
            Schedule::Resume => "It fires again, its next time counted from now.",
            Schedule::Trigger => "It fires once now, as if it were due.",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Field<T> {
        #[serde(rename = "do")]
        act: T,
    }

    #[test]
    fn actions_read_by_name_and_an_unknown_one_is_named() {
        let f: Field<Run> = serde_json::from_str(r#"{"do": "advance"}"#).unwrap();
        assert_eq!(f.act, Run::Advance);
        assert_eq!(f.act.as_str(), "advance");
        let e = serde_json::from_str::<Field<Schedule>>(r#"{"do": "delete"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant `delete`"), "{e}");
        assert_eq!(
            Power::Off.operation(),
            OperationCode::Power(PowerOperation::PowerOff)
        );
    }
}
