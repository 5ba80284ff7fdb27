/// Every keyword OpenSSH 9.2's ssh reads in ssh_config (lower-cased), current and deprecated:
/// one of these that ``SSHConfigResolver`` does not use is ignored, as ssh ignores what it does
/// not support; any other word is a mistake (ssh's "Bad configuration option"). The list was
/// taken from ssh itself: each candidate word was given to `ssh -G -F FILE` and kept unless ssh
/// called it a bad option.
enum SSHConfigKeywords {
    static let known: Set<String> = [
        "addkeystoagent", "addressfamily", "afstokenpassing", "batchmode", "bindaddress", "bindinterface",
        "canonicaldomains", "canonicalizefallbacklocal", "canonicalizehostname", "canonicalizemaxdots",
        "canonicalizepermittedcnames", "casignaturealgorithms", "certificatefile", "challengeresponseauthentication",
        "checkhostip", "cipher", "ciphers", "clearallforwardings", "compression", "compressionlevel",
        "connectionattempts", "connecttimeout", "controlmaster", "controlpath", "controlpersist",
        "dsaauthentication", "dynamicforward", "enableescapecommandline", "enablesshkeysign", "escapechar",
        "exitonforwardfailure", "fallbacktorsh", "fingerprinthash", "forkafterauthentication", "forwardagent",
        "forwardx11", "forwardx11timeout", "forwardx11trusted", "gatewayports", "globalknownhostsfile",
        "globalknownhostsfile2", "gssapiauthentication", "gssapiclientidentity", "gssapidelegatecredentials",
        "gssapikexalgorithms", "gssapikeyexchange", "gssapirenewalforcesrekey", "gssapiserveridentity",
        "gssapitrustdns", "hashknownhosts", "host", "hostbasedacceptedalgorithms", "hostbasedauthentication",
        "hostbasedkeytypes", "hostkeyalgorithms", "hostkeyalias", "hostname", "identitiesonly", "identityagent",
        "identityfile", "identityfile2", "ignoreunknown", "include", "ipqos", "kbdinteractiveauthentication",
        "kbdinteractivedevices", "keepalive", "kerberosauthentication", "kerberostgtpassing", "kexalgorithms",
        "knownhostscommand", "localcommand", "localforward", "loglevel", "logverbose", "macs", "match",
        "nohostauthenticationforlocalhost", "numberofpasswordprompts", "passwordauthentication",
        "permitlocalcommand", "permitremoteopen", "pkcs11provider", "port", "preferredauthentications", "protocol",
        "protocolkeepalives", "proxycommand", "proxyjump", "proxyusefdpass", "pubkeyacceptedalgorithms",
        "pubkeyacceptedkeytypes", "pubkeyauthentication", "rekeylimit", "remotecommand", "remoteforward",
        "requesttty", "requiredrsasize", "revokedhostkeys", "rhostsauthentication", "rhostsrsaauthentication",
        "securitykeyprovider", "sendenv", "serveralivecountmax", "serveraliveinterval", "sessiontype", "setenv",
        "setuptimeout", "skeyauthentication", "smartcarddevice", "stdinnull", "streamlocalbindmask",
        "streamlocalbindunlink", "stricthostkeychecking", "syslogfacility", "tcpkeepalive", "tisauthentication",
        "tunnel", "tunneldevice", "updatehostkeys", "useblacklistedkeys", "useprivilegedport", "user",
        "userknownhostsfile", "userknownhostsfile2", "useroaming", "usersh", "verifyhostkeydns", "visualhostkey",
        "xauthlocation",
    ]
}
