//! Front end: program text → syntax tree ([`ast::Program`]), and back ([`printer::print`]).

pub mod ast;
pub mod lexer;
pub mod parser;
pub mod printer;

pub use ast::Program;
pub use parser::{parse, parse_all};
pub use printer::print;
