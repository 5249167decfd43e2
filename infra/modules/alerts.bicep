// The alerts an admin of this app needs, each to one action group (email):
//   an audit seal failed    the audit_seal timer failed: the log did not verify or no anchor was written
//   a poison-queue message  a turn failed five times and landed in <turn queue>-poison (turns_poison ran)
//   a 5xx rate              more than 5 % of the HTTP requests (the Teams webhook) failed on the server
//   PostgreSQL connections  above 80 % of the server's max_connections
//   bot secret near expiry  30 days before the date given for the bot's client secret
// The first three query the Function App's Application Insights (its invocations are `requests`).

param namePrefix string
param tags object
param appInsightsId string
param workspaceId string
param postgresId string
@description('The PostgreSQL server\'s max_connections (main.bicep\'s table of SKUs): the alert fires above 80 %.')
param postgresMaxConnections int
@description('Where the alerts are emailed (a shared mailbox or a distribution list).')
param alertEmail string
@description('The day the bot\'s client secret expires (yyyy-mm-dd, from the app registration).')
param botSecretExpiresOn string
@description('Days before that day the alert starts firing.')
param botSecretWarningDays int = 30

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = {
  name: '${namePrefix}-admins'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'copilotops'
    enabled: true
    emailReceivers: [
      {
        name: 'admins'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

var logAlerts = {
  auditSeal: {
    title: 'Audit seal failed'
    description: 'The audit_seal timer failed: the audit log did not verify against its anchors, or no anchor could be written. Run python -m copilot audit verify (docs/ADMIN.md).'
    severity: 1
    scope: appInsightsId
    frequency: 'PT5M'
    window: 'PT15M'
    query: 'requests | where operation_Name == "audit_seal" and success == false'
  }
  poisonQueue: {
    title: 'Turn in the poison queue'
    description: 'A rep\'s turn failed five times and was moved to the poison queue (turns_poison ran): the rep was told; see its exception in Application Insights.'
    severity: 2
    scope: appInsightsId
    frequency: 'PT5M'
    window: 'PT15M'
    query: 'requests | where operation_Name == "turns_poison"'
  }
  serverErrors: {
    title: 'HTTP 5xx rate above 5 %'
    description: 'More than 5 % of the HTTP requests (the Teams webhook /api/messages) failed on the server in 15 minutes.'
    severity: 2
    scope: appInsightsId
    frequency: 'PT5M'
    window: 'PT15M'
    query: 'requests | where isnotempty(url) | summarize total = count(), failed = countif(toint(resultCode) >= 500) | where total >= 10 and failed * 100.0 / total > 5'
  }
  botSecretExpiry: {
    title: 'Bot client secret expires soon'
    description: 'The bot\'s client secret (MicrosoftAppPassword) expires on ${botSecretExpiresOn}: create a new one, put it in the vault and redeploy with its new date (docs/ADMIN.md, Key rotation).'
    severity: 2
    scope: workspaceId
    frequency: 'PT6H'
    window: 'PT6H'
    query: 'print expiresOn = datetime(${botSecretExpiresOn}) | where expiresOn < now() + ${botSecretWarningDays}d'
  }
}

resource auditSealAlert 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
  name: '${namePrefix}-audit-seal'
  location: resourceGroup().location
  tags: tags
  properties: {
    displayName: logAlerts.auditSeal.title
    description: logAlerts.auditSeal.description
    severity: logAlerts.auditSeal.severity
    enabled: true
    scopes: [
      logAlerts.auditSeal.scope
    ]
    evaluationFrequency: logAlerts.auditSeal.frequency
    windowSize: logAlerts.auditSeal.window
    criteria: {
      allOf: [
        {
          query: logAlerts.auditSeal.query
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource poisonQueueAlert 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
  name: '${namePrefix}-poison-queue'
  location: resourceGroup().location
  tags: tags
  properties: {
    displayName: logAlerts.poisonQueue.title
    description: logAlerts.poisonQueue.description
    severity: logAlerts.poisonQueue.severity
    enabled: true
    scopes: [
      logAlerts.poisonQueue.scope
    ]
    evaluationFrequency: logAlerts.poisonQueue.frequency
    windowSize: logAlerts.poisonQueue.window
    criteria: {
      allOf: [
        {
          query: logAlerts.poisonQueue.query
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource serverErrorsAlert 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
  name: '${namePrefix}-http-5xx'
  location: resourceGroup().location
  tags: tags
  properties: {
    displayName: logAlerts.serverErrors.title
    description: logAlerts.serverErrors.description
    severity: logAlerts.serverErrors.severity
    enabled: true
    scopes: [
      logAlerts.serverErrors.scope
    ]
    evaluationFrequency: logAlerts.serverErrors.frequency
    windowSize: logAlerts.serverErrors.window
    criteria: {
      allOf: [
        {
          query: logAlerts.serverErrors.query
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource botSecretAlert 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
  name: '${namePrefix}-bot-secret-expiry'
  location: resourceGroup().location
  tags: tags
  properties: {
    displayName: logAlerts.botSecretExpiry.title
    description: logAlerts.botSecretExpiry.description
    severity: logAlerts.botSecretExpiry.severity
    enabled: true
    scopes: [
      logAlerts.botSecretExpiry.scope
    ]
    evaluationFrequency: logAlerts.botSecretExpiry.frequency
    windowSize: logAlerts.botSecretExpiry.window
    criteria: {
      allOf: [
        {
          query: logAlerts.botSecretExpiry.query
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: [
        actionGroup.id
      ]
    }
  }
}

resource postgresConnectionsAlert 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${namePrefix}-postgres-connections'
  location: 'global'
  tags: tags
  properties: {
    description: 'PostgreSQL connections above 80 % of max_connections: python -m copilot doctor (database.connections) shows who holds them and the pool size that fits.'
    severity: 2
    enabled: true
    scopes: [
      postgresId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'active-connections'
          metricNamespace: 'Microsoft.DBforPostgreSQL/flexibleServers'
          metricName: 'active_connections'
          operator: 'GreaterThan'
          threshold: (postgresMaxConnections * 80) / 100
          timeAggregation: 'Maximum'
        }
      ]
    }
    actions: [
      {
        actionGroupId: actionGroup.id
      }
    ]
  }
}
