//! Front end: program text → syntax tree ([`ast::Program`]), and back ([`printer::print`]);
//! the one rewrite of the tree before it becomes a fusion ([`dequantize::hoist_scales`]).

pub mod ast;
pub mod dequantize;
pub mod lexer;
pub mod parser;
pub mod printer;

pub use ast::Program;
pub use parser::{parse, parse_all};
pub use printer::print;
