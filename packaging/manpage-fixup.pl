# Turns a page of swift-argument-parser's generate-manual into Debian's shape (see scripts/package).
our ($section, $spoken);
if (/^\.Sh (\S+)/) { $section = $1; }
s{^(\.(?:Dt|Xr) )(\S+)}{$1 . ($2 =~ tr/./-/r)}e;
$_ = "" if /^\.Xr cf-access-tcp-help /;
if ($section eq "NAME" && /^\.Nm "([^"]+)"$/) { $spoken = $1; my $n = $1 =~ tr/ /-/r; $_ = ".Nm $n\n"; }
elsif (defined $spoken && /^\.Nm$/) { $_ = ".Nm \"$spoken\"\n"; }
$_ = ".Pp\n" if /^\s*$/;
