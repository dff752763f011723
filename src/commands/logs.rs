use crate::cli::{Global, LogsArgs};
use crate::error::{Error, Result};
use crate::ui::Ui;

pub fn run(_g: &Global, _ui: &Ui, _a: LogsArgs) -> Result<u8> {
    Err(Error::failure("`hvdctl logs` is being written"))
}
