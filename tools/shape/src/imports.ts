// Every module a source file reaches, read from its syntax tree (TypeScript's parser, which reads
// JavaScript too): static imports, re-exports, side-effect imports, `import()`, `require()`,
// `import x = require()` and `typeof import('x')` types. Each says whether it reaches the module at
// run time (`value`) or only its types (`type`); an `import()` or `require()` of anything but a
// literal is `computed`, because no rule can see where it leads.
import ts from 'typescript';

export type ImportKind = 'value' | 'type' | 'computed';

export interface ImportReference {
  /** The module specifier; for a computed import, the expression's text. */
  readonly specifier: string;
  readonly kind: ImportKind;
  /** 1-based. */
  readonly line: number;
}

function literalText(node: ts.Node | undefined): string | undefined {
  if (node !== undefined && (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node))) {
    return node.text;
  }
  return undefined;
}

function isTypeOnlyImport(node: ts.ImportDeclaration): boolean {
  const clause = node.importClause;
  if (clause === undefined) return false; // `import 'x'` runs the module
  return clause.isTypeOnly;
}

export function importsOf(sourceText: string, fileName = 'source.ts'): ImportReference[] {
  const kind = /\.[mc]?jsx?$/.test(fileName) ? ts.ScriptKind.JS : ts.ScriptKind.TSX;
  const file = ts.createSourceFile(fileName, sourceText, ts.ScriptTarget.Latest, true, kind);
  const found: ImportReference[] = [];
  const add = (node: ts.Node, specifier: string, importKind: ImportKind): void => {
    const line = file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1;
    found.push({ specifier, kind: importKind, line });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) {
      const specifier = literalText(node.moduleSpecifier);
      if (specifier !== undefined) add(node, specifier, isTypeOnlyImport(node) ? 'type' : 'value');
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier !== undefined) {
      const specifier = literalText(node.moduleSpecifier);
      if (specifier !== undefined) add(node, specifier, node.isTypeOnly ? 'type' : 'value');
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      const specifier = literalText(node.moduleReference.expression);
      if (specifier !== undefined) add(node, specifier, node.isTypeOnly ? 'type' : 'value');
    } else if (ts.isImportTypeNode(node)) {
      const argument = node.argument;
      const specifier = ts.isLiteralTypeNode(argument) ? literalText(argument.literal) : undefined;
      if (specifier !== undefined) add(node, specifier, 'type');
    } else if (ts.isCallExpression(node)) {
      const isImport = node.expression.kind === ts.SyntaxKind.ImportKeyword;
      const isRequire = ts.isIdentifier(node.expression) && node.expression.text === 'require';
      if (isImport || isRequire) {
        const argument = node.arguments[0];
        const specifier = literalText(argument);
        if (specifier !== undefined) add(node, specifier, 'value');
        else add(node, argument === undefined ? '' : argument.getText(file), 'computed');
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}
